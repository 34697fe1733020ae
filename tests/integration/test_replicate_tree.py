"""A recursive job of 50 datasets sent in parallel on zfs-fuse (issue 38): one dataset whose target
diverged fails alone, the others land, and the run says which failed."""

import json

import pytest
from conftest import rebal, rebal_json
from replscenarios import cfg_for, snaps
from setupscenarios import same
from treescenarios import make_wide_tree, touch
from zfsenv import sh

pytestmark = pytest.mark.zfs


def test_fifty_datasets_in_parallel_one_fails_alone(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="512M")
    kids = make_wide_tree(src.name, 50)
    cfg = cfg_for(tmp_path, backup_host, name="wide", source=f"{src.name}/tree", target=f"{dst.name}/t",
                  recursive=True, parallel=6)
    r1 = rebal_json("replicate", "wide", config=cfg)
    assert r1["outcome"] == "ok" and len(r1["datasets"]) == 51 and {d["kind"] for d in r1["datasets"]} == {"full"}, r1
    bad = kids[7]
    sh("zfs", "snapshot", f"{dst.name}/t/d007@someone-elses")  # this target diverges
    for k in kids[::5]:
        touch(k)
    r = rebal("replicate", "wide", "--json", config=cfg, check=False)
    r2 = json.loads(r.stdout)
    assert r.returncode == 1 and r2["outcome"] == "failed", r2
    kinds = {d["source"]: d["kind"] for d in r2["datasets"]}
    assert kinds.pop(bad) == "failed" and set(kinds.values()) == {"incremental"} and len(kinds) == 50, kinds
    assert r2["error"].startswith(f"{bad}: the target of {bad} has snapshots newer") and "d0" not in r2["error"].split(":", 1)[1].replace(bad, ""), r2["error"]
    for k in kids[::5]:
        if k != bad:
            same(k, f"{dst.name}/t/{k.rsplit('/', 1)[1]}")
    assert r1["snapshot"] in snaps(bad), "the failed dataset's base stays"
    sh("zfs", "destroy", f"{dst.name}/t/d007@someone-elses")
    r3 = rebal_json("replicate", "wide", config=cfg)
    assert r3["outcome"] == "ok", r3
    assert {d["source"]: (d["kind"], d["base"]) for d in r3["datasets"]}[bad] == ("incremental", r1["snapshot"])
    same(bad, f"{dst.name}/t/d007")
