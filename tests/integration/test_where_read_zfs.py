"""`rebal where --read` on real zfs-fuse pools (the shares are real; the throughput is FUSE's)."""

import pytest
from readscenarios import read_spread_scenario

pytestmark = pytest.mark.zfs


def test_reads_fall_on_the_old_vdevs_then_on_all(make_pool, tmp_path):
    got = read_spread_scenario(make_pool, tmp_path, "192M", files=8, mib=8, rebalance_args=["--all"])
    assert any("zfs-fuse" in n for n in got["after"]["notes"])
