"""The planner measures (issue 15): on a pool grown twice, directories written after the first growth
are big but lie half on the new vdev, so the model's order (largest first) rewrites them first and
moves little; the measured order takes the data on the full vdevs first. Two identical pools, same
target: the measured run reaches the target with fewer bytes rewritten (both figures reported)."""

import json
import os

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest, temp_leftovers
from zfsenv import logging_shim, sh, write_cfg

pytestmark = pytest.mark.zfs
MIB = 1 << 20


def write_dirs(root, prefix: str, ndirs: int, files: int, mib: int, seed: int) -> None:
    block = bytearray(os.urandom(MIB))
    for d in range(ndirs):
        p = root / f"{prefix}{d:02d}"
        p.mkdir(parents=True)
        for f in range(files):
            with open(p / f"f{f}", "wb") as fh:
                for i in range(mib):
                    block[:12] = (seed * 1_000_000 + d * 1000 + f * 10 + i).to_bytes(12, "little")
                    fh.write(block)


def grown_twice(make_pool):
    pool = make_pool([[], []], size="192M")
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    write_dirs(data, "old", ndirs=24, files=4, mib=2, seed=1)  # 192 MiB on two vdevs
    pool.add(str(pool.disk("192M")))
    write_dirs(data, "new", ndirs=6, files=4, mib=4, seed=2)  # 96 MiB, in bigger directories, after the add
    return pool, data


def test_measured_plan_reaches_the_target_with_fewer_bytes(make_pool, tmp_path):
    figures = {}
    for how in ("model", "measured"):
        pool, data = grown_twice(make_pool)
        work = tmp_path / how
        work.mkdir()
        cfg = write_cfg(work)
        before = manifest(data)
        plan = rebal_json("plan", f"{pool.name}/data", "--target-spread", "12", "--placement", how, config=cfg)
        assert plan["placement"] == how and plan["spread_now"] > 20, plan
        first = os.path.basename(plan["dirs"][0]["path"])
        shim, calls = logging_shim(work, "zdb")
        r = rebal("rebalance", f"{pool.name}/data", "--target-spread", "12", "--placement", how, "--json", config=cfg,
                  env={"PATH": f"{shim}:{os.environ['PATH']}"})
        done = json.loads(r.stdout.splitlines()[-1])
        asked = calls.read_text().splitlines() if calls.exists() else []
        # the measured run reads the pool's vdev ids once (zdb -C opens the pool: seconds on a big one),
        # for its plan and for its report of where the rewritten data went
        assert sum(1 for a in asked if a.split()[:1] == ["-C"]) == (1 if how == "measured" else 0), asked
        assert done["outcome"] == "ok" and done["spread_after"] <= 12, done
        assert manifest(data) == before and temp_leftovers(data) == []
        figures[how] = {"bytes": done["bytes"], "first_dir": first, "spread_before": done["spread_before"],
                        "spread_after": done["spread_after"], "planned_bytes": plan["bytes_planned"],
                        "predicted": plan["spread_predicted"], "placement": done.get("placement")}
        pool.destroy()
    print("measured vs model plan:", json.dumps(figures))
    with open(os.environ.get("REBAL_FIGURES", "/var/tmp/rebal-figures.jsonl"), "a") as f:
        f.write(json.dumps({"test": "measured-plan", **figures}) + "\n")
    assert figures["model"]["first_dir"].startswith("new")  # largest first
    assert figures["measured"]["first_dir"].startswith("old")  # the data on the full vdevs first
    assert figures["measured"]["bytes"] < figures["model"]["bytes"], figures
    # the report shows where the rewritten data was and is: off the two full vdevs, onto the new one
    pl = figures["measured"]["placement"]
    assert pl and pl["after"], figures["measured"]
    new = list(pl["before"])[-1]
    assert pl["before"][new] < 0.1 and pl["after"][new] > 0.2, pl
