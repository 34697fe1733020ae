"""The scan on a real tmpfs: filters, skips, temp names, other file systems."""

import os
import time
from datetime import datetime

import pytest

from rebal.errors import UsageError
from rebal.rebalance.options import until_epoch
from rebal.rebalance.prepare import default_jobs
from rebal.rebalance.scan import Filters, scan


def make(root, rel, size=10, age_days=0):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(b"x" * size)
    if age_days:
        t = time.time() - age_days * 86400
        os.utime(p, (t, t))
    return p


def names(res):
    return sorted(d.path.rsplit(b"/", 1)[-1] for d in res.dirs)


def test_filters_and_skips(richfs):
    make(richfs, "keep/a.bin", 5000, age_days=40)
    make(richfs, "keep/young.bin", 5000)
    make(richfs, "keep/small.bin", 10, age_days=40)
    make(richfs, "cache/x.bin", 5000, age_days=40)
    make(richfs, "keep/skip.tmp", 5000, age_days=40)
    make(richfs, "keep/.rebal-1f.tmp", 5000, age_days=40)
    os.symlink("a.bin", richfs / "keep" / "link")
    os.mkfifo(richfs / "keep" / "fifo")
    f = Filters(exclude=("cache", "skip.*"), min_age_days=30, min_size=100)
    res = scan([os.fsencode(richfs)], f)
    assert res.files == 1 and res.bytes == 5000 and names(res) == [b"keep"]
    c = res.skips.counts
    assert c["excluded"] == 2  # the cache directory and skip.tmp
    assert c["filtered (age or size)"] == 2 and c["symlink (left as it is)"] == 1
    assert c["special file (socket, fifo or device)"] == 1 and c["rebal temp file"] == 1


def test_max_size_and_pinned_by_snapshot_time(richfs):
    make(richfs, "old.bin", 3000, age_days=10)
    make(richfs, "new.bin", 2000)
    make(richfs, "huge.bin", 90000)
    res = scan([os.fsencode(richfs)], Filters(max_size=50000), snapshot_times=[time.time() - 20 * 86400, time.time() - 86400])
    assert res.files == 2 and res.pinned_bytes == 3000 and res.largest == 3000
    assert res.pinned_by == [0, 3000]  # the older snapshot predates old.bin: it pins none of it


def test_nested_targets_are_walked_once(richfs):
    from rebal.rebalance.prepare import resolve_targets

    make(richfs, "a/b/c.bin", 100)

    class OneDataset:  # the file system of the test stands for a mounted dataset
        def dataset_for_path(self, path):
            return "tank/data", str(richfs)

    targets = resolve_targets(OneDataset(), [str(richfs / "a" / "b"), str(richfs / "a"), str(richfs / "a")])
    assert [t.root for t in targets] == [os.fsencode(richfs / "a")]
    with pytest.raises(UsageError, match="not a directory"):
        resolve_targets(OneDataset(), [str(richfs / "a" / "b" / "c.bin")])


def test_until_epoch():
    now = datetime(2026, 11, 22, 5, 30).astimezone()
    assert until_epoch("06:00", now) - now.timestamp() == pytest.approx(1800)
    assert until_epoch("05:00", now) - now.timestamp() == pytest.approx(23.5 * 3600)
    with pytest.raises(UsageError):
        until_epoch("25:00", now)


def test_default_jobs_bounds():
    assert 4 <= default_jobs(2) <= 16
    assert default_jobs(1) == 4 and default_jobs(100) <= 16
