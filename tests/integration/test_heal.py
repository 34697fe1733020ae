"""`rebal heal` on zfs-fuse: a pool with no damage is said so and nothing runs; a pool no zfs job backs
up, or a job of another pool, is bad input (exit 2). The repair itself (zfs receive -c, OpenZFS 2.2+)
is proven in the lane (tests/openzfs/test_lane_heal.py)."""

import pytest
from conftest import rebal, rebal_json
from replscenarios import cfg_for, make_tree
from zfsenv import sh

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


def test_zfs_fuse_says_in_one_line_that_it_cannot_heal(make_pool, backup_host, tmp_path):
    """A real permanent error on zfs-fuse (a block of a file written over on its vdev, seen by a
    scrub): zfs-fuse has no corrective receive, and heal says so in one line, pointing to restore."""
    import os
    import re
    import time

    from replscenarios import mountpoint
    from zfsenv import sh

    src, dst = make_pool([[]], size="256M"), make_pool([[]], size="256M")
    sh("zfs", "create", "-o", "compression=off", f"{src.name}/data")
    path = os.path.join(mountpoint(f"{src.name}/data"), "f")
    with open(path, "wb") as f:
        f.write(os.urandom(2 << 20))
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    src.cycle()
    out = sh("zdb", "-ddddd", f"{src.name}/data", str(os.stat(path).st_ino)).stdout
    off = int(re.search(r"^\s*0\s+L0\s+0:([0-9a-f]+):", out, re.M).group(1), 16)
    with open(src.disks[0], "r+b") as f:
        f.seek(off + (4 << 20))  # past the vdev's front labels
        f.write(os.urandom(32 << 10))
    src.cycle()
    sh("zpool", "scrub", src.name)
    deadline = time.monotonic() + 60
    while "scrub in progress" in sh("zpool", "status", src.name).stdout:
        assert time.monotonic() < deadline, "the scrub did not end"
        time.sleep(0.2)  # polling the pool's state, bounded (zfs-fuse has no zpool wait)
    listed = sh("zpool", "status", "-v", src.name).stdout  # zfs-fuse names the snapshot that holds the block
    assert "Permanent errors" in listed and ":/f" in listed, listed
    r = rebal("heal", src.name, config=cfg, check=False)
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no corrective receive" in lines[0] and "rebal restore" in lines[0], r.stderr


def test_each_jobs_backup_is_looked_for_on_its_own_host(make_pool, backup_host, tmp_path):
    """Issue 65: heal reached every job's backup through the first job's connection, so a pool backed
    up by a job over ssh and another to a local pool looked for the second's backup on the wrong host.
    Planned on real pools (the corrective receive itself is the lane's): each damaged dataset's
    backup is found on its own job's host, this one for the local job, over ssh for the other."""
    from rebal.config import load
    from rebal.recover.heal import Heal
    from rebal.replicate.job import connect
    from rebal.zfs.damage import Damaged

    src, dst = make_pool([[]], size="256M"), make_pool([[]], size="256M")
    for d in ("a", "b"):
        sh("zfs", "create", f"{src.name}/{d}")
    cfg_path = cfg_for(tmp_path, backup_host, name="a", source=f"{src.name}/a", target=f"{dst.name}/a")
    cfg_path.write_text(cfg_path.read_text() + f'[[replicate]]\nname = "b"\nsource = "{src.name}/b"\n'
                        f'target = "{dst.name}/b"\n')
    point = {j: rebal_json("replicate", j, config=cfg_path)["snapshot"] for j in ("a", "b")}
    cfg = load(str(cfg_path))
    jobs = [cfg.job("a"), cfg.job("b")]
    assert not jobs[0].local_target and jobs[1].local_target
    asked, opened = [], []

    def link_of(j):
        asked.append(j.name)
        opened.append(connect(j))
        return opened[-1]

    try:
        h = Heal(src.name, jobs, link_of, dry_run=True)
        plan = h._plan([Damaged(f"{src.name}/{j}@{point[j]}:/f", dataset=f"{src.name}/{j}", snapshot=point[j])
                        for j in ("a", "b")])
    finally:
        for w in opened:
            w.__exit__(None, None, None)
    where = {ds: (job.name, backup.local, bsnap) for (ds, _), (job, backup, bsnap) in plan.items()}
    assert where == {f"{src.name}/a": ("a", False, f"{dst.name}/a@{point['a']}"),
                     f"{src.name}/b": ("b", True, f"{dst.name}/b@{point['b']}")}, where
    assert set(asked) == {"a", "b"}
