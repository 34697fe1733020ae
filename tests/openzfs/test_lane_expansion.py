"""RAIDZ expansion on real OpenZFS: raidz1 of 3 disks filled, a 4th attached; the plan measures the
capacity held back by the old data:parity ratio from the block pointers (each block's allocated size
says the width it was written at), a rebalance returns it (`zfs get available` grows by the measured
figure, within 5%), and a second rebalance rewrites nothing."""

import json
import os

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from lanelib import prop, write_random
from zfsenv import sh

pytestmark = pytest.mark.openzfs

FIGURES = os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl")


def test_expansion_is_reclaimed_once(make_pool, cfg_file):
    pool = make_pool([["raidz1", 3]], size="512M")
    sh("zfs", "create", "-o", "compression=off", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    for d in range(4):
        (data / f"d{d}").mkdir(parents=True)
        for i in range(10):
            write_random(data / f"d{d}" / f"f{i}.bin", 5, seed=d * 100 + i)
    sh("zpool", "sync", pool.name)
    sh("zpool", "attach", "-f", pool.name, "raidz1-0", str(pool.disk("512M")))
    sh("zpool", "wait", "-t", "raidz_expand", pool.name)

    plan = rebal_json("plan", f"{pool.name}/data", config=cfg_file)
    rc = plan["expansion"]
    assert rc and rc["goal"] == "reclaim", plan
    assert (rc["vdevs"][0]["width_before"], rc["vdevs"][0]["width_after"]) == (3, 4)
    assert rc["old_ratio_files"] == 40 and rc["reclaim_bytes"] > 15 << 20, rc
    assert rc["how"].startswith("measured from the block pointers of 40 file(s)"), rc
    assert rc["estimated"]["old_ratio_files"] == 40, rc  # the estimate from file times, kept beside it
    before = manifest(data)
    avail0 = int(prop(f"{pool.name}/data", "available"))
    r = rebal("rebalance", f"{pool.name}/data", "--json", config=cfg_file)
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["outcome"] == "ok" and done["files"] == 40, done
    sh("zpool", "sync", pool.name)
    avail1 = int(prop(f"{pool.name}/data", "available"))
    grown = avail1 - avail0
    with open(FIGURES, "a") as f:
        f.write(json.dumps({"test": "expansion", "predicted": rc["reclaim_bytes"], "estimated": rc["estimated"],
                            "available_grew": grown, "run_reclaim": done.get("reclaim"), "method": plan["method"]}) + "\n")
    assert abs(grown - rc["reclaim_bytes"]) <= 0.05 * grown, (grown, rc)
    assert manifest(data) == before
    again = rebal_json("plan", f"{pool.name}/data", config=cfg_file)
    assert again["expansion"]["old_ratio_files"] == 0
    r2 = rebal("rebalance", f"{pool.name}/data", "--json", config=cfg_file)
    assert json.loads(r2.stdout.splitlines()[-1])["files"] == 0
