"""One contract for this host's ZFS through each way that works here (pyzfs's libzfs_core where it
loads, the zfs command always): the same ZfsHost calls, run against every one available."""

from datetime import datetime, timedelta, timezone

import pytest
from zfsenv import sh

from rebal.replicate.policy import snapshot_name
from rebal.replicate.source_snaps import take_snapshot
from rebal.transport import Here
from rebal.zfs.host import NoBookmarks, ZfsHost, here_hosts

pytestmark = [pytest.mark.zfs, pytest.mark.lane]

BACKENDS = here_hosts(Here())


@pytest.fixture(params=BACKENDS, ids=[b.backend for b in BACKENDS])
def backend(request, make_pool):
    pool = make_pool([[]], size="128M")
    sh("zfs", "create", f"{pool.name}/d")
    sh("zfs", "create", f"{pool.name}/d/kid")
    request.node.pool = pool
    return request.param, pool


def test_snapshot_atomic_and_recursive(backend):
    b, pool = backend
    b.snapshot([f"{pool.name}/d@one"])
    assert b.exists(f"{pool.name}/d@one") and not b.exists(f"{pool.name}/d/kid@one")
    b.snapshot([f"{pool.name}/d@two"], recursive=True)
    assert b.exists(f"{pool.name}/d@two") and b.exists(f"{pool.name}/d/kid@two")
    assert [s.name for s in ZfsHost(Here()).snapshots(f"{pool.name}/d") or []] == ["one", "two"]
    assert not b.exists(f"{pool.name}/d@nope")


def test_a_run_in_the_same_second_as_the_last_takes_the_next_seconds_name(backend):
    """Seen in CI: a replication run that began within the second of the previous run's snapshot
    failed with "dataset already exists". Now it waits for the next second and takes that name."""
    b, pool = backend
    t0 = datetime(2026, 11, 23, 12, 0, 0, 250_000, tzinfo=timezone.utc)
    b.snapshot([f"{pool.name}/d@{snapshot_name('j', t0)}"], recursive=True)  # the last run's
    times, slept = iter([t0 + timedelta(milliseconds=100), t0 + timedelta(seconds=1)]), []
    snap = take_snapshot(b, f"{pool.name}/d", "j", True, lambda: next(times), sleep=slept.append)
    assert snap == snapshot_name("j", t0 + timedelta(seconds=1)) == "rebal-j-20261123T120001Z"
    assert len(slept) == 1 and 0.6 < slept[0] <= 1.0  # to the next second, not a fixed pause
    assert b.exists(f"{pool.name}/d/kid@{snap}")
    # a name the backup already has (OpenZFS: the last run's snapshot was pruned, its bookmark kept)
    t2 = t0 + timedelta(seconds=5)
    times = iter([t2, t2 + timedelta(milliseconds=400), t2 + timedelta(seconds=1)])
    snap = take_snapshot(b, f"{pool.name}/d", "j", False, lambda: next(times), sleep=slept.append,
                         avoid={snapshot_name("j", t2)})
    assert snap == "rebal-j-20261123T120006Z" and len(slept) == 3
    assert not b.exists(f"{pool.name}/d@{snapshot_name('j', t2)}")
    del slept[1:]
    # any other failure is raised as it is, with no retry
    with pytest.raises(Exception):
        take_snapshot(b, f"{pool.name}/gone", "j", False, lambda: t0, sleep=slept.append)
    assert len(slept) == 1, "no wait for a failure that is not a name clash"


def test_hold_keeps_a_snapshot_until_released(backend):
    b, pool = backend
    snap = f"{pool.name}/d@held"
    b.snapshot([snap])
    b.hold("rebal-test", [snap])
    assert sh("zfs", "destroy", snap, check=False).returncode != 0  # held: cannot go
    assert b.exists(snap)
    b.release("rebal-test", [snap])
    b.release("rebal-test", [snap])  # releasing a hold that is gone is not an error
    sh("zfs", "destroy", snap)
    assert not b.exists(snap)


def test_bookmark_or_a_clear_refusal(backend):
    b, pool = backend
    b.snapshot([f"{pool.name}/d@bm"])
    try:
        b.bookmark(f"{pool.name}/d@bm", f"{pool.name}/d#bm")
    except NoBookmarks as e:
        assert "no bookmarks" in str(e)  # zfs-fuse (pool v23)
    else:
        assert b.exists(f"{pool.name}/d#bm")


def test_bad_names_never_reach_zfs(backend):
    b, pool = backend
    from rebal.errors import UsageError

    with pytest.raises(UsageError):
        b.snapshot([f"{pool.name}/d@-o"])
