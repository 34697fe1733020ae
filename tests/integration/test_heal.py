"""`rebal heal` on zfs-fuse: a pool with no damage is said so and nothing runs; a pool no zfs job backs
up, or a job of another pool, is bad input (exit 2). The repair itself (zfs receive -c, OpenZFS 2.2+)
is proven in the lane (tests/openzfs/test_lane_heal.py)."""

import pytest
from conftest import rebal, rebal_json
from replscenarios import cfg_for, make_tree

pytestmark = pytest.mark.zfs


def test_heal_of_a_clean_pool_and_bad_input(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="256M"), make_pool([[]], size="256M")
    make_tree(src)
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    rep = rebal_json("heal", src.name, config=cfg)
    assert rep["before"] == [] and rep["files"] == [] and rep["corrected"] == [], rep
    assert "no permanent errors" in rebal("heal", src.name, config=cfg).stdout
    runs = rebal_json("runs", "--kind", "heal", config=cfg)["runs"]
    assert [r["outcome"] for r in runs] == ["ok", "ok"], runs
    r = rebal("heal", dst.name, config=cfg, check=False)
    assert r.returncode == 2 and f"no zfs-mode replication job backs up pool {dst.name}" in r.stderr, r.stderr
    r = rebal("heal", dst.name, "--job", "j", config=cfg, check=False)
    assert r.returncode == 2 and f"job j does not back up pool {dst.name}" in r.stderr, r.stderr
    r = rebal("heal", "no/such", config=cfg, check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
