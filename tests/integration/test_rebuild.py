"""`rebal rebuild` on zfs-fuse: a pool checked against its backup, recorded, destroyed and made again
(by the test, as the admin would), restored with its datasets' properties, and its job going on
incrementally. zfs-fuse has no written@ property: the admin's --writers-stopped is required and said."""

import pytest
from replscenarios import make_tree
from restorescenarios import lose_and_recreate, rebuild_scenario

pytestmark = pytest.mark.zfs


def test_a_pool_rebuilt_from_its_backup(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[], []], size="256M"), make_pool([[]], size="512M")
    make_tree(src)
    rec, done, nxt = rebuild_scenario(src, dst, backup_host, tmp_path, recreate=lose_and_recreate,
                                      props={"data/child": ("atime", "off"), "data/sibling": ("compression", "gzip")},
                                      writers_flag=("--writers-stopped",))
    assert any("--writers-stopped" in n for n in rec["notes"]), rec["notes"]


def test_without_written_a_rebuild_is_refused_before_any_work(make_pool, backup_host, tmp_path):
    """zfs-fuse cannot say what was written after the restore point: the refusal comes before the
    check's replication run and before anything is recorded (it came after both: `--status` then
    showed a "covered" step per attempt), and the layout line does not say "ashift 0"."""
    import json

    from conftest import rebal
    from replscenarios import cfg_for, fill

    src, dst = make_pool([[]], size="256M"), make_pool([[]], size="256M")
    make_tree(src)
    cfg = cfg_for(tmp_path, backup_host, name="all", source=f"{src.name}/data", target=f"{dst.name}/data",
                  recursive=True)
    fill(src, 1)
    r = rebal("rebuild", src.name, "--job", "all", config=cfg, check=False)
    assert r.returncode == 2 and "--writers-stopped" in r.stderr, r.stderr
    runs = json.loads(rebal("runs", "--json", config=cfg).stdout)
    assert [x for x in runs["runs"] if x.get("kind") == "replicate"] == [], runs
    st = rebal("rebuild", src.name, "--status", config=cfg, check=False)
    assert st.returncode == 2 and "no rebuild of" in st.stderr, (st.stdout, st.stderr)
    done = rebal("rebuild", src.name, "--job", "all", "--writers-stopped", config=cfg)
    assert "ashift 0" not in done.stdout and "the pool as it was (" in done.stdout, done.stdout
