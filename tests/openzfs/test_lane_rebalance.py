"""The rebalance on real OpenZFS: `--method auto` runs `zfs rewrite -P` (inodes kept) and stops
under the target; `--method copy` keeps the tree identical and never block-clones."""

import json

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest, temp_leftovers
from lanelib import inodes, pool_prop
from treegen import mixed_tree
from zfsenv import sh, write_cfg

pytestmark = pytest.mark.openzfs




def grown(make_pool, size="256M"):
    pool = make_pool([[], []], size=size)
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    mixed_tree(data, small=500, large=8, large_mib=(10, 16), seed=11)
    sh("zpool", "sync", pool.name)
    pool.add(str(pool.disk(size)), str(pool.disk(size)))
    return pool, data


def test_auto_uses_zfs_rewrite_P_keeps_inodes_and_stops_under_target(make_pool, tmp_path):
    pool, data = grown(make_pool)
    cfg = write_cfg(tmp_path)
    assert pool_prop(pool.name, "feature@physical_rewrite") in ("enabled", "active")
    plan = rebal_json("plan", f"{pool.name}/data", "--target-spread", "10", config=cfg)
    assert plan["method"] == "rewrite -P", plan
    assert plan["spread_now"] > 15
    before, ino = manifest(data), inodes(data)
    r = rebal("rebalance", f"{pool.name}/data", "--target-spread", "10", "--json", config=cfg)
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["outcome"] == "ok" and done["files"] > 0, done
    after = rebal_json("status", pool.name, config=cfg)["pools"][0]
    assert after["spread"] <= 10, after
    assert inodes(data) == ino, "zfs rewrite works in place: every inode stays"
    assert manifest(data) == before
    assert pool_prop(pool.name, "feature@physical_rewrite") == "active"


def test_copy_keeps_the_tree_and_never_block_clones(make_pool, tmp_path):
    pool, data = grown(make_pool)
    cfg = write_cfg(tmp_path)
    assert pool_prop(pool.name, "feature@block_cloning") in ("enabled", "active")
    before, ino = manifest(data), inodes(data)
    r = rebal("rebalance", f"{pool.name}/data", "--method", "copy", "--target-spread", "10", "--hardlinks",
              "--json", config=cfg)
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["outcome"] == "ok" and done["files"] > 0, done
    assert rebal_json("status", pool.name, config=cfg)["pools"][0]["spread"] <= 10
    assert manifest(data) == before  # content, modes, owners, ns times, xattrs, link groups
    assert temp_leftovers(data) == []
    moved = sum(1 for k, v in inodes(data).items() if ino.get(k) != v)
    assert moved > 0, "copy-and-rename makes new inodes"
    assert int(pool_prop(pool.name, "bcloneused")) == 0, "a copy that clones blocks moves nothing"
