"""`rebal rebuild` on real OpenZFS 2.4, the seed's complete rebalance: a pool made with ashift=9 of
one raidz1 vdev, an encrypted tree (one encryption root, raw sends), replicated; checked (nothing
written after the point, every file equal on the backup), destroyed and made again as two mirrors
with ashift=12 (by the test, as the admin would), restored: the tree, its properties and its one
encryption root as they were, the next incremental small, and the new layout evenly filled."""

import os
import subprocess
from pathlib import Path

import pytest
from conftest import rebal_json
from restorescenarios import rebuild_scenario
from zfsenv import sh

pytestmark = pytest.mark.openzfs


@pytest.mark.lane_long  # 89 s under TCG; CI's suite runs the rebuild on zfs-fuse (tests/integration/test_rebuild.py)
def test_ashift_9_raidz1_rebuilt_as_ashift_12_mirrors(make_pool, backup_host, tmp_path):
    src = make_pool([["raidz1", 3]], size="512M", ashift=9)
    dst = make_pool([[]], size="2G")
    key = tmp_path / "data.key"
    key.write_bytes(os.urandom(32))
    sh("zfs", "create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", f"keylocation=file://{key}",
       f"{src.name}/data")
    for ds in ("data/child", "data/child/grandchild", "data/sibling"):
        sh("zfs", "create", f"{src.name}/{ds}")  # inherit the encryption root
    spare = src.disk("512M")

    def recreate(pool):
        pool.destroy()
        for d in pool.disks:
            size = os.path.getsize(d)
            os.truncate(d, 0)
            os.truncate(d, size)
        d0, d1, d2 = pool.disks[:3]
        sh("zpool", "create", "-f", "-o", "ashift=12", "-m", str(pool.mountpoint), pool.name,
           "mirror", str(d0), str(d1), "mirror", str(d2), str(spare))

    rec, done, nxt = rebuild_scenario(
        src, dst, backup_host, tmp_path, recreate=recreate, job_extra={"raw": True},
        props={"data/child": ("atime", "off"), "data/sibling": ("recordsize", "1048576")},
        encrypted={ds: f"file://{key}" for ds in ("data", "data/child", "data/child/grandchild", "data/sibling")})
    assert rec["ashift"] == "9" and "raidz1" in rec["layout"]
    assert set(rec["crypt"]) == {f"{src.name}/data{r}" for r in ("", "/child", "/child/grandchild", "/sibling")}
    assert sh("zpool", "get", "-H", "-o", "value", "ashift", src.name).stdout.strip() == "12"
    assert sum(d["bytes"] for d in nxt["datasets"]) < 8 << 20, nxt["datasets"]  # the third fill's few MiB, not the tree
    st = rebal_json("status", src.name, config=tmp_path / "config.toml")
    pool = st["pools"][0] if "pools" in st else st
    vdevs = [v for v in pool["vdevs"] if v.get("class", "normal") == "normal"]
    assert len(vdevs) == 2 and all(v["type"] == "mirror" for v in vdevs), vdevs
    assert pool["spread"] < 5, pool  # restored onto the new layout: evenly filled


@pytest.mark.lane_long  # the quick set has the same four steps with restore --all (test_lane_restore)
def test_a_rebuild_of_a_tree_whose_datasets_have_different_newest_points(make_pool, backup_host, tmp_path):
    """Issue 64's four steps with `rebal rebuild` as step 3 on OpenZFS (a dataset with nothing written
    gets no snapshot): a child alone written and sent; the rebuild's tree has the child's file, and
    the job goes on incrementally for every dataset."""
    from restorescenarios import older_point_scenario, rebuild_instead

    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="1G")
    older_point_scenario(src, dst, backup_host, tmp_path, lose=rebuild_instead(src))


def test_the_printed_zpool_create_runs_as_printed(make_pool, tmp_path):
    """On OpenZFS 2.4.4 the old line said feature@bookmark_v2=active, which zpool create refuses, and
    put a pool comment into the admin's shell unquoted. The line is run here exactly as printed (the
    layout placeholder replaced by the new vdevs), through a shell as the admin would."""
    from rebal.recover.rebuild_steps import create_command
    from rebal.transport import Here
    from rebal.zfs.host import ZfsHost

    pool = make_pool([[]], size="256M")
    canary = Path(f"/tmp/rbpw{os.getpid()}")  # a pool comment holds at most 32 characters
    sh("zpool", "set", f"comment=x;touch {canary}", pool.name)
    sh("zfs", "create", f"{pool.name}/d")
    sh("zfs", "snapshot", f"{pool.name}/d@s")
    sh("zfs", "bookmark", f"{pool.name}/d@s", f"{pool.name}/d#b")  # bookmark_v2 or bookmarks: active
    props = ZfsHost(Here()).pool_props(pool.name)
    assert any(v == "active" for k, v in props.items() if k.startswith("feature@")), props
    line = create_command(pool.name, 12, {k: v for k, v in props.items() if k not in ("ashift", "guid")}, {})
    pool.destroy()
    disk = pool.disks[0]
    os.truncate(disk, 0)
    os.truncate(disk, 256 << 20)
    printed = line.split(" <", 1)[0] + f" {disk}"
    r = subprocess.run(["bash", "-c", printed], capture_output=True, text=True)
    assert r.returncode == 0, (printed, r.stderr)
    assert not canary.exists()
    assert sh("zpool", "get", "-H", "-o", "value", "comment", pool.name).stdout.strip() == f"x;touch {canary}"
