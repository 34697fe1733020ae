"""A special vdev added to a pool full of old data (issue 66): `rebal plan --to
special` measures from the block pointers the metadata and small blocks still on the normal vdevs,
and `rebal rebalance --to special` rewrites the files that hold them (in place, by zfs rewrite), not
the big files whose indirect blocks are a sliver of them. Measured again after the run, read here by
rebal's own measure and by the pool's figures: what left the normal vdevs, what the special vdev
took, the tree as it was."""

from __future__ import annotations

import json
import os
import random

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from lanelib import inodes, write_random, zpool_list_hp, zpool_sync
from zfsenv import sh, write_cfg

pytestmark = pytest.mark.openzfs

FIGURES = os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl")


def test_a_new_special_vdev_takes_the_old_small_files_and_metadata(make_pool, tmp_path):
    pool = make_pool([[], []], size="512M", ashift=12)
    ds = f"{pool.name}/data"
    sh("zfs", "create", ds)
    data = pool.mountpoint / "data"
    rng = random.Random(66)
    small_bytes = 0
    for d in range(8):
        (data / f"s{d}").mkdir(parents=True)
        for i in range(40):  # 320 small files of 6-24 KiB: one data block each, under 32K
            n = rng.randrange(6 << 10, 24 << 10)
            (data / f"s{d}" / f"f{i}").write_bytes(os.urandom(n))
            small_bytes += n
    (data / "big").mkdir()
    for i in range(6):  # 6 files of 8 MiB in 128K blocks: an indirect block each, 0.05% of them
        write_random(data / "big" / f"b{i}", 8, seed=i)
    zpool_sync(pool.name)
    sh("zpool", "add", "-f", pool.name, "special", str(pool.disk("256M")))
    sh("zfs", "set", "special_small_blocks=32K", ds)
    zpool_sync(pool.name)
    before, inos = manifest(data), inodes(data)
    cfg = write_cfg(tmp_path)

    plan = rebal_json("plan", str(data), "--to", "special", config=cfg)
    # every small file's block is bound for the special vdev (4K sectors: at least its size)
    assert plan["datasets"][0]["small_bytes"] >= small_bytes, plan
    assert plan["datasets"][0]["metadata_bytes"] >= 6 * 4096  # each big file's L1
    chosen = plan["chosen"]
    assert chosen["files"] == 320, chosen  # the small files, not the big ones
    assert chosen["bytes"] < 2 * small_bytes + (1 << 20), chosen
    assert chosen["share_of_bound"] > 0.9
    assert "special" in rebal("plan", str(data), "--to", "special", config=cfg).stdout

    special_before = sum(v["alloc"] for v in zpool_list_hp(pool.name).values() if v["section"] == "special")
    out = rebal("rebalance", str(data), "--to", "special", "--json", config=cfg)
    done = json.loads(out.stdout.splitlines()[-1])
    assert done["outcome"] == "ok", done
    assert [p["method"] for p in done["passes"]] == ["rewrite"]
    moved = done["moved"]
    predicted = plan["predicted"]["metadata_moved"] + plan["predicted"]["small_moved"]
    assert moved["bound_after"] <= 0.1 * moved["bound_before"], moved
    assert moved["left_normal_bytes"] >= 0.8 * predicted, (moved, predicted)
    zpool_sync(pool.name)
    special_after = sum(v["alloc"] for v in zpool_list_hp(pool.name).values() if v["section"] == "special")
    assert special_after - special_before >= 0.8 * moved["left_normal_bytes"], (special_before, special_after, moved)
    assert manifest(data) == before
    assert inodes(data) == inos  # in place
    # a second run finds nothing worth a rewrite
    again = json.loads(rebal("rebalance", str(data), "--to", "special", "--json", config=cfg).stdout.splitlines()[-1])
    assert again["outcome"] == "ok" and "nothing to move" in again["reason"], again
    with open(FIGURES, "a") as f:
        f.write(json.dumps({"test": "special", "small_file_bytes": small_bytes, "plan_bound": plan["bound_bytes"],
                            "plan_chosen": chosen, "predicted": plan["predicted"], "moved": moved,
                            "special_pool_alloc": [special_before, special_after]}) + "\n")
