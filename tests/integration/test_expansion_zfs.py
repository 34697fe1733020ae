"""After a RAIDZ expansion, on a real zfs-fuse pool with one raidz1 vdev. zfs-fuse cannot expand a
raidz, so what `zpool status` says of the expansion is the recorded OpenZFS 2.4.4 text (rz-* fixtures)
with this pool's name and a completion time this test chooses; the files, the scan and the copy are
real. The block pointers say no expansion happened (measured: nothing at an old ratio), so the
rewrite here follows the file-time estimate (`placement="model"`, as where zdb cannot run). The
expansion itself, its measured old-ratio bytes and the free space a rewrite returns are tested in
the OpenZFS lane."""

import os
import time

import pytest
from conftest import fixture_text
from fsenv import manifest, temp_leftovers
from zfsenv import sh

from rebal import state
from rebal.rebalance import engine
from rebal.rebalance.options import Options, RefusedError
from rebal.rebalance.prepare import prepare
from rebal.transport import Here
from rebal.zfs.host import ZfsHost
from rebal.zfs.parse import parse_zpool_status

pytestmark = pytest.mark.zfs


class ExpandedZpool(ZfsHost):
    """The real pool, but `zpool status` answers with a recorded expansion of raidz1-0."""

    def __init__(self, pool, fixture, ended: float | None = None):
        super().__init__(Here())
        text = fixture_text(fixture).replace("  pool: rz", f"  pool: {pool.name}")
        text = text.replace("\trz  ", f"\t{pool.name}  ")
        if ended is not None:
            text = text.replace("Sun Nov 22 00:03:21 2026", time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(ended)))
        self.recorded = text

    def status(self, pool_names=()):
        return parse_zpool_status(self.recorded)


def write(path, n):
    with open(path, "wb") as f:
        f.write(os.urandom(n))


@pytest.fixture
def raidz(make_pool, tmp_path):
    pool = make_pool([["raidz1", 3]], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    for d in range(3):
        (data / f"d{d}").mkdir(parents=True)
        for i in range(10):
            write(data / f"d{d}" / f"f{i}", 300_000)
    return pool, data


def test_plan_reports_the_reclaim_and_the_rewrite_takes_only_old_files(raidz, tmp_path):
    pool, data = raidz
    sh("sync")
    ended = time.time() + 1  # the expansion completed after the 30 files were written ...
    while time.time() < ended + 0.01:
        time.sleep(0.05)  # ctime has whole-second granularity on zfs-fuse: step past the boundary
    time.sleep(1.0)
    write(data / "d0" / "new-after-expansion", 200_000)  # ... and this one after it
    zpool = ExpandedZpool(pool, "rz-expanded_zpool-status-v.txt", ended)
    conn = state.connect(tmp_path / "s.db")
    # measured from the block pointers, the recorded expansion is seen for what it is here: this vdev
    # was never expanded, no block is stored wider than it stores one now; the file-time estimate
    # (what the plan falls back on where zdb cannot run) is kept beside it
    seen = prepare(Options(targets=[f"{pool.name}/data"], target_spread=10, method="copy"), zpool, conn).reclaim
    assert seen["how"].startswith("measured from the block pointers of 31 file(s)"), seen
    assert (seen["old_ratio_files"], seen["reclaim_bytes"], seen["estimated"]["old_ratio_files"]) == (0, 0, 30), seen
    opts = Options(targets=[f"{pool.name}/data"], target_spread=10, method="copy", placement="model")
    prep = prepare(opts, zpool, conn)
    rc = prep.reclaim
    assert prep.reclaim_only and rc["goal"] == "reclaim"
    assert rc["vdevs"][0]["vdev"] == "raidz1-0"
    assert (rc["vdevs"][0]["width_before"], rc["vdevs"][0]["width_after"]) == (3, 4)
    assert rc["old_ratio_files"] == 30
    assert rc["reclaim_bytes"] == int(rc["old_ratio_bytes"] / 9)  # raidz1 3 -> 4: 1 - 2/3 * 4/3
    assert prep.scan.skips.counts["written since the RAIDZ expansion (already at the new ratio)"] == 1
    before = manifest(data)
    new_ino = os.lstat(data / "d0" / "new-after-expansion").st_ino
    rep = engine.execute(prep, opts, zpool, conn, str(tmp_path / "s.db"))
    assert rep.outcome == "ok" and rep.files == 30, rep
    assert "available_before" in rep.reclaim and "available_after" in rep.reclaim
    assert manifest(data) == before and temp_leftovers(data) == []
    assert os.lstat(data / "d0" / "new-after-expansion").st_ino == new_ino, "new data is left alone"
    # a second run rewrites nothing again: the directories were rewritten after the expansion
    prep2 = prepare(opts, zpool, conn)
    assert prep2.reclaim["old_ratio_files"] == 0
    rep2 = engine.execute(prep2, opts, zpool, conn, str(tmp_path / "s.db"))
    assert rep2.files == 0


def test_running_expansion_and_plain_single_vdev_are_refused_clearly(raidz, tmp_path):
    pool, _data = raidz
    with pytest.raises(RefusedError, match="still running.*zpool wait -t raidz_expand"):
        prepare(Options(targets=[f"{pool.name}/data"]),
                       ExpandedZpool(pool, "rz-expanding_zpool-status-v.txt"))
    with pytest.raises(RefusedError, match="1 data vdev and no expanded RAIDZ vdev"):
        prepare(Options(targets=[f"{pool.name}/data"]), ZfsHost.here())
