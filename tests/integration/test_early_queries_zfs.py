"""The queries `rebal rebalance` starts before rebal is loaded are exactly the command lines prepare
runs: on a real zfs-fuse pool, prepare takes every one of them and plans what it plans without them."""

import pytest
from zfsenv import sh

from rebal import early
from rebal.rebalance.prepare import Options, prepare
from rebal.zfs import queries
from rebal.zfs.cli import Zfs, Zpool

pytestmark = pytest.mark.zfs


def test_prepare_takes_every_query_started_early_and_plans_the_same(make_pool):
    pool = make_pool([[], []], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    for i in range(40):
        (data / f"f{i}").write_bytes(bytes([i]) * (4096 + i))
    sh("zfs", "snapshot", f"{pool.name}/data@s1")
    opts = Options(targets=[str(data)], method="auto", placement="model")
    without = prepare(opts, Zpool(), Zfs())
    early.drop()
    try:
        early.start(queries.first(pool.name, [f"{pool.name}/data"], rewrite=True))
        assert len(early.started()) == 2  # figures with features, snapshots (no `zpool status`: asked after them)
        with_early = prepare(opts, Zpool(), Zfs())
        assert early.started() == []  # every command line started early was one prepare runs
    finally:
        early.drop()
    assert [s[0] for s in with_early.snapshots] == [f"{pool.name}/data@s1"]
    assert (with_early.method, with_early.physical, with_early.snapshots) == \
        (without.method, without.physical, without.snapshots)
    assert [v.name for v in with_early.pool.data_vdevs] == [v.name for v in without.pool.data_vdevs]
    assert with_early.scan.files == without.scan.files == 40
    assert with_early.scan.pinned_bytes == without.scan.pinned_bytes > 0
