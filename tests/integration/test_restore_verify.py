"""Restore and verify against a real backup host (sshd on loopback, a second zfs-fuse pool)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from test_replicate import cfg_for, fill, mountpoint, pools, snaps  # noqa: F401  (fixtures)
from zfsenv import sh

from rebal.zfs.snapview import SnapView
from rebal.transport import Here
from rebal.zfs.host import ZfsHost

pytestmark = pytest.mark.zfs
KIDS = ("child", "sibling")


@pytest.fixture
def replicated(pools, backup_host, tmp_path):  # noqa: F811
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  bwlimit="16M", retention_source={"last": 5}, retention_target={"last": 5})
    fill(src, 1)
    first = rebal_json("replicate", "j", config=cfg)
    fill(src, 2)
    second = rebal_json("replicate", "j", config=cfg)
    assert first["outcome"] == second["outcome"] == "ok"
    return src, dst, cfg, first["snapshot"], second["snapshot"]


def snapshot_manifest(ds, snap, **kw):
    with SnapView(ZfsHost(Here()), ds, snap, "test") as view:
        return manifest(view, **kw)


def test_backups_list(replicated):
    src, dst, cfg, s1, s2 = replicated
    b = rebal_json("backups", "j", config=cfg)
    assert [p["name"] for p in b["points"]] == [s1, s2]
    assert all(p["created"] and p["referenced"] > 0 for p in b["points"])


def test_restore_older_snapshot_into_a_new_dataset(replicated):
    src, dst, cfg, s1, s2 = replicated
    out = rebal_json("restore", "j", "--at", s1, "--to", f"{src.name}/restored", config=cfg)
    assert out["kind"] == "dataset" and out["point"] == s1 and out["bytes"] > 0
    assert manifest(mountpoint(f"{src.name}/restored"), exclude=KIDS) == snapshot_manifest(
        f"{src.name}/data", s1, exclude=KIDS)
    runs = rebal_json("runs", "--kind", "restore", config=cfg)["runs"]
    assert runs[0]["outcome"] == "ok"


def test_restore_refuses_existing_and_live_source(replicated):
    src, dst, cfg, s1, s2 = replicated
    r = rebal("restore", "j", "--to", f"{src.name}/data", config=cfg, check=False)
    assert r.returncode == 2 and "live source" in r.stderr and "--force" in r.stderr  # a refusal (README)
    r = rebal("restore", "j", "--at", "rebal-j-20200101T000000Z", "--to", f"{src.name}/x", config=cfg, check=False)
    assert "no restore point @rebal-j-20200101T000000Z" in r.stderr and s1 in r.stderr


def test_restore_a_file_and_a_directory_by_path(replicated, tmp_path):
    src, dst, cfg, s1, s2 = replicated
    dest = tmp_path / "back"
    dest.mkdir()
    rebal("restore", "j", "--at", s2, "--path", "top/2", "--to", str(dest), config=cfg)
    want = snapshot_manifest(f"{src.name}/data", s2)
    got = manifest(dest / "2")
    groups = got.pop("__hardlink_groups__")
    assert got == {k[len(b"top/2/"):]: v for k, v in want.items() if isinstance(k, bytes) and k.startswith(b"top/2/")}
    assert groups, "hardlinks are restored as hardlinks"
    rebal("restore", "j", "--at", s2, "--path", "top/1/small00013", "--to", str(dest), config=cfg)
    one = manifest(dest, exclude=("2",))
    assert one[b"small00013"] == want[b"top/1/small00013"]  # content, mode, owner, mtime
    r = rebal("restore", "j", "--path", "top/1/small00013", "--to", str(dest), config=cfg, check=False)
    assert r.returncode == 2 and "exists: not overwritten" in r.stderr
    rebal("restore", "j", "--path", "top/1/small00013", "--to", str(dest), "--force", config=cfg)


def test_interrupted_restore_completes_on_rerun(replicated):
    src, dst, cfg, s1, s2 = replicated
    with open(os.path.join(mountpoint(f"{src.name}/data"), "big.bin"), "wb") as f:
        f.write(os.urandom(40 * 2**20))
    s3 = rebal_json("replicate", "j", config=cfg)["snapshot"]
    proc = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "restore", "j", "--to",
                             f"{src.name}/back"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    killed = False
    while time.monotonic() < deadline and not killed:
        runs = rebal_json("runs", "--kind", "restore", "--limit", "1", config=cfg)["runs"]
        if runs and runs[0]["outcome"] == "running or crashed" and (runs[0]["progress"] or 0) >= 4 * 2**20:
            proc.send_signal(signal.SIGKILL)  # the restore dies halfway
            killed = True
        time.sleep(0.05)
    proc.communicate(timeout=60)
    assert killed
    out = rebal_json("restore", "j", "--to", f"{src.name}/back", config=cfg)
    assert out["point"] == s3
    assert manifest(mountpoint(f"{src.name}/back"), exclude=KIDS) == manifest(mountpoint(f"{src.name}/data"), exclude=KIDS)


def test_verify_good_backup_then_guid_mismatch_is_critical(replicated):
    src, dst, cfg, s1, s2 = replicated
    good = rebal("verify", "j", "--sample", "all", "--json", config=cfg)
    doc = json.loads(good.stdout)
    assert good.returncode == 0 and doc["level"] == "OK" and doc["snapshot"] == s2
    assert doc["files"][0] == doc["files"][1] > 100 and len(doc["sample"]) == doc["files"][0]
    # the backup's @s1 replaced by another snapshot of the same name: other data under that name
    sh("zfs", "destroy", f"{dst.name}/copy@{s1}")
    sh("zfs", "snapshot", f"{dst.name}/copy@{s1}")
    bad = rebal("verify", "j", "--json", config=cfg, check=False)
    assert bad.returncode == 2
    assert any(f"@{s1} on the backup is not the source's @{s1}" in f["message"] for f in json.loads(bad.stdout)["findings"])
    h = rebal("health", config=cfg, check=False)
    assert h.returncode == 2 and "the last verify found the backup differs" in h.stdout


def test_verify_warns_that_a_written_target_breaks_the_next_incremental(replicated):
    src, dst, cfg, s1, s2 = replicated
    sh("zfs", "set", "readonly=off", f"{dst.name}/copy")
    with open(os.path.join(mountpoint(f"{dst.name}/copy"), "oops"), "wb") as f:
        f.write(os.urandom(300_000))
    r = rebal("verify", "j", "--json", config=cfg, check=False)
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and doc["level"] == "WARNING", doc
    [w] = [f for f in doc["findings"] if f["level"] == "WARNING"]
    assert "next incremental will fail" in w["message"] and "--force-rollback" in w["message"]


def test_rsync_verify_names_a_changed_file(pools, backup_host, tmp_path):  # noqa: F811
    src, dst = pools
    target = os.path.join(mountpoint(dst.name), "files")
    cfg = cfg_for(tmp_path, backup_host, name="r", mode="rsync", source=f"{src.name}/data", target=target)
    fill(src, 1)
    assert rebal_json("replicate", "r", config=cfg)["outcome"] == "ok"
    ok = rebal("verify", "r", "--sample", "all", config=cfg)
    assert ok.returncode == 0 and ok.stdout.startswith("OK")
    victim = os.path.join(target, "top", "1", "small00026")
    data = bytearray(open(victim, "rb").read())
    data[len(data) // 2] ^= 0x01  # one bit of one byte
    st = os.stat(victim)
    with open(victim, "r+b") as f:
        f.write(data)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and time: only content differs
    bad = rebal("verify", "r", "--sample", "all", config=cfg, check=False)
    assert bad.returncode == 2
    assert "CRITICAL job:r: top/1/small00026: content differs on the backup" in bad.stdout
    assert "top/1/small00026: rsync --checksum finds it differs" in bad.stdout


def test_scrub_and_its_findings(make_pool, backup_host, tmp_path):
    pool = make_pool([[]], size="128M")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_db = "{tmp_path / "s.db"}"\npools = ["{pool.name}"]\n')
    r = rebal("health", config=cfg, check=False)
    assert r.returncode == 0 and "never scrubbed" not in r.stdout, r.stdout  # made a minute ago: not overdue
    old = tmp_path / "old.toml"  # a scrub age limit (0.09 s) this young pool is past: the first health
    # run above (a whole process start) already took longer than that since the pool's creation
    old.write_text(cfg.read_text() + "[health]\nscrub_max_age_days = 0.000001\n")
    r = rebal("health", config=old, check=False)
    assert r.returncode == 1 and f"WARNING {pool.name}: never scrubbed" in r.stdout
    r = rebal("scrub", "rbtnosuchpool", config=cfg, check=False)
    assert r.returncode == 5 and r.stderr.startswith("rebal: error: no such pool: rbtnosuchpool"), r  # README: 5
    assert rebal("scrub", pool.name, config=cfg).stdout.strip() in (f"{pool.name}: scrub started",)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "in progress" in sh("zpool", "status", pool.name).stdout:
        time.sleep(0.1)  # waits on the pool's own state, bounded
    assert rebal("health", config=cfg).returncode == 0


def test_scrub_the_backup_pool(replicated):
    src, dst, cfg, s1, s2 = replicated
    out = rebal("scrub", "--job", "j", config=cfg).stdout
    assert f"127.0.0.1:{dst.name}: scrub started" in out or "scrub running" in out


def test_restore_a_path_in_child_datasets_of_a_recursive_job(pools, backup_host, tmp_path):  # noqa: F811
    from replscenarios import restore_path_in_children_scenario

    src, dst = pools
    restore_path_in_children_scenario(src, dst, backup_host, tmp_path)


def test_rsync_job_restores_a_path_of_a_child_dataset(pools, backup_host, tmp_path):  # noqa: F811
    """An rsync job copies child datasets into directories of its target; a path into one of them
    comes back from the target's snapshot and from the current copy."""
    src, dst = pools
    sh("zfs", "create", f"{dst.name}/files")
    target = mountpoint(f"{dst.name}/files")
    cfg = cfg_for(tmp_path, backup_host, name="r", mode="rsync", source=f"{src.name}/data", target=target,
                  recursive=True, snapshot_target=True, retention_source={"last": 5}, retention_target={"last": 5})
    fill(src, 1)
    want = manifest(mountpoint(f"{src.name}/data/child/grandchild"))
    first = rebal_json("replicate", "r", config=cfg)
    assert first["outcome"] == "ok", first
    with open(os.path.join(mountpoint(f"{src.name}/data/child/grandchild"), "f1"), "r+b") as f:
        f.write(b"changed")
    assert rebal_json("replicate", "r", config=cfg)["outcome"] == "ok"
    for at, name in ((first["snapshot"], "old"), ("current", "new")):
        dest = tmp_path / name
        dest.mkdir()
        rebal("restore", "r", "--at", at, "--path", "child/grandchild/f1", "--to", str(dest), config=cfg)
        got = manifest(dest)[b"f1"]
        assert (got == want[b"f1"]) == (at != "current"), at
    # a cut run's partial-dir left in the copy (rsync makes one where a file was cut) is not data:
    # a directory restored from the current copy comes back without it
    leftover = os.path.join(target, "child", "grandchild", ".rebal-partial")
    os.makedirs(leftover)
    with open(os.path.join(leftover, "f1"), "wb") as f:
        f.write(b"half a file")
    dest = tmp_path / "dir"
    dest.mkdir()
    rebal("restore", "r", "--at", "current", "--path", "child/grandchild", "--to", str(dest), config=cfg)
    got = manifest(dest)
    keys = [k.decode() if isinstance(k, bytes) else k for k in got]
    assert any(k.endswith("f1") for k in keys) and not [k for k in keys if ".rebal-partial" in k], sorted(keys)


def test_restore_before_the_first_backup_says_there_is_none_yet(pools, backup_host, tmp_path):  # noqa: F811
    """Found by the sequence test: before any replication, restore and backups printed zfs's own
    "cannot open 'x/copy': dataset does not exist"."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    for argv in (["restore", "j", "--path", "top", "--to", str(tmp_path / "r")], ["backups", "j"]):
        r = rebal(*argv, config=cfg, check=False)
        assert r.returncode == 1, (argv, r.stderr)
        assert f"no restore point: the backup host has no {dst.name}/copy yet (rebal replicate j makes the first)" \
            in r.stderr, r.stderr


def test_a_restore_moves_its_stream_as_the_job_does(pools, backup_host, tmp_path):  # noqa: F811
    """Issue 65: a dataset's restore is the replication's stream with the hosts swapped, so it is
    compressed with zstd and buffered by mbuffer where the job says so (the dry run shows the pipe,
    each end's part on its host), and the data comes back equal through that pipe."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="z", source=f"{src.name}/data", target=f"{dst.name}/z",
                  stream_compress="zstd", mbuffer=True, mbuffer_size="4M")
    fill(src, 1)
    point = rebal_json("replicate", "z", config=cfg)["snapshot"]
    plan = rebal_json("restore", "z", "--to", f"{src.name}/back", "--dry-run", config=cfg)
    line = " ".join(plan["planned"])
    assert "zfs send" in line and "zstd -c" in line and "zstd -dc" in line and "mbuffer" in line, line
    assert line.index("zfs send") < line.index("zstd -c") < line.index("zstd -dc") < line.index("zfs receive"), line
    out = rebal_json("restore", "z", "--to", f"{src.name}/back", config=cfg)
    assert out["bytes"] > 0
    assert manifest(mountpoint(f"{src.name}/back"), exclude=KIDS) == snapshot_manifest(
        f"{src.name}/data", point, exclude=KIDS)
