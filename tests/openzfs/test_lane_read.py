"""`rebal where --read` on real OpenZFS 2.4: on a grown pool the old data's reads fall on the old
vdevs before a rebalance and on every vdev after it (each reading cold: the pool exported and imported
first); a rebalance with --measure-read records both readings, and `rebal runs` shows them."""

import json
import os

import pytest
from readscenarios import read_spread_scenario

pytestmark = pytest.mark.openzfs

FIGURES = os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl")


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_reads_fall_on_the_old_vdevs_then_on_all(make_pool, tmp_path):
    got = read_spread_scenario(make_pool, tmp_path, "512M", files=8, mib=16, rebalance_args=["--all"])
    assert not any("zfs-fuse" in n for n in got["after"]["notes"])
    with open(FIGURES, "a") as f:
        f.write(json.dumps({"test": "where-read", **{w: {"shares": [v["share_bytes"] for v in got[w]["vdevs"]],
                                                          "throughput": got[w]["throughput_bytes_per_second"],
                                                          "from_disk": got[w]["from_disk"]} for w in ("before", "after")}}) + "\n")
