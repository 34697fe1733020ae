"""`rebal restore JOB --all` on real OpenZFS 2.4: the whole tree back (into a new name, then under the
job's own names on a recreated pool, and onto a new pool's root), the job going on incrementally from
the restored point; and a restore killed mid-stream resumed from its receive token."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import rebal_json
from fsenv import manifest
from lanelib import write_random
from replscenarios import cfg_for, mountpoint
from restorescenarios import restore_tree_scenario
from zfsenv import sh

pytestmark = pytest.mark.openzfs


@pytest.mark.lane_long  # 142 s under TCG; CI's suite runs the same scenario on zfs-fuse, its quick lane the tree's and the raw one
def test_a_whole_tree_comes_back_and_the_chain_goes_on(make_pool, backup_host, tmp_path):
    src, dst, spare = make_pool([[], []], size="512M"), make_pool([[]], size="1G"), make_pool([[]], size="512M")
    out, after = restore_tree_scenario(src, dst, backup_host, tmp_path, spare=spare)
    # OpenZFS: every dataset came back by a resumable receive, and the job's next run sent only the new
    print("restored", out["bytes"], "bytes; the next incremental", sum(d["bytes"] for d in after["datasets"]))


@pytest.mark.lane_long  # CI's quick set resumes a cut stream from its token in the killed failback (the same Transfer)
def test_a_cut_restore_resumes_from_its_token(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="1G"), make_pool([[]], size="1G")
    sh("zfs", "create", f"{src.name}/vm")
    sh("zfs", "create", f"{src.name}/vm/disk")
    write_random(os.path.join(mountpoint(f"{src.name}/vm"), "a.img"), 96, seed=1)
    write_random(os.path.join(mountpoint(f"{src.name}/vm/disk"), "b.img"), 8, seed=2)
    want = {ds: manifest(mountpoint(f"{src.name}/{ds}"), exclude=("disk",)) for ds in ("vm", "vm/disk")}
    cfg = cfg_for(tmp_path, backup_host, name="vm", source=f"{src.name}/vm", target=f"{dst.name}/vm",
                  recursive=True, bwlimit="8M")  # the restore streams at the job's bwlimit: 12 s for the 96 MiB
    assert rebal_json("replicate", "vm", config=cfg)["outcome"] == "ok"
    to = f"{src.name}/back"
    base = int(sh("zpool", "list", "-Hp", "-o", "alloc", src.name).stdout)
    p = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "restore", "vm", "--all", "--to", to,
                          "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while int(sh("zpool", "list", "-Hp", "-o", "alloc", src.name).stdout) - base < 24 << 20:
        assert p.poll() is None and time.monotonic() < deadline, "the restore ended before it could be cut"
        time.sleep(0.5)  # polling the pool's state, bounded
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 60
    while to in subprocess.run(["pgrep", "-af", "zfs receive"], capture_output=True, text=True).stdout:  # this one's
        assert time.monotonic() < deadline, "a receive still runs after the kill"
        time.sleep(0.5)
    token = sh("zfs", "get", "-H", "-o", "value", "receive_resume_token", to).stdout.strip()
    assert token not in ("", "-"), "the cut receive left no token"
    done = rebal_json("restore", "vm", "--all", "--to", to, config=cfg)
    assert [(d["target"], d["kind"]) for d in done["datasets"]] == [(to, "resumed"), (f"{to}/disk", "full")], done
    assert done["datasets"][0]["bytes"] < 80 << 20, done  # the rest of the stream, not all of it again
    assert sh("zfs", "get", "-H", "-o", "value", "receive_resume_token", to).stdout.strip() == "-"
    for ds, rel in (("vm", ""), ("vm/disk", "/disk")):
        assert manifest(mountpoint(to + rel), exclude=("disk",)) == want[ds], ds


@pytest.mark.lane_long  # the rebuild test covers encryption roots too; this one the plain restore --all
def test_a_raw_tree_comes_back_with_one_encryption_root(make_pool, backup_host, tmp_path):
    """A raw job's encrypted tree (one root, children inheriting): restored with --all, each dataset is
    its own encryption root (a raw receive's doing) until --key-location loads the keys and the
    children inherit the top's root again; never an unencrypted dataset."""
    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="512M")
    key = tmp_path / "k"
    key.write_bytes(os.urandom(32))
    sh("zfs", "create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", f"keylocation=file://{key}",
       f"{src.name}/sec")
    sh("zfs", "create", f"{src.name}/sec/kid")
    write_random(os.path.join(mountpoint(f"{src.name}/sec"), "a"), 4, seed=1)
    write_random(os.path.join(mountpoint(f"{src.name}/sec/kid"), "b"), 4, seed=2)
    want = {rel: manifest(mountpoint(f"{src.name}/sec{rel}"), exclude=("kid",)) for rel in ("", "/kid")}
    cfg = cfg_for(tmp_path, backup_host, name="sec", source=f"{src.name}/sec", target=f"{dst.name}/sec",
                  recursive=True, raw=True)
    assert rebal_json("replicate", "sec", config=cfg)["outcome"] == "ok"

    def roots(top):
        out = sh("zfs", "get", "-H", "-r", "-t", "filesystem", "-o", "name,value", "encryptionroot", top).stdout
        return dict(line.split("\t") for line in out.splitlines())

    plain = rebal_json("restore", "sec", "--all", "--to", f"{src.name}/plain", config=cfg)
    assert any("--key-location" in n for n in plain["notes"]), plain["notes"]
    assert roots(f"{src.name}/plain") == {f"{src.name}/plain": f"{src.name}/plain",
                                          f"{src.name}/plain/kid": f"{src.name}/plain/kid"}
    back = rebal_json("restore", "sec", "--all", "--to", f"{src.name}/back", "--key-location", f"file://{key}",
                      config=cfg)
    assert [d["kind"] for d in back["datasets"]] == ["full", "full"], back
    assert set(roots(f"{src.name}/back").values()) == {f"{src.name}/back"}  # one root, as the source had
    for rel in ("", "/kid"):
        assert manifest(mountpoint(f"{src.name}/back{rel}"), exclude=("kid",)) == want[rel], rel


def test_a_raw_jobs_dataset_comes_back_encrypted_without_all(make_pool, backup_host, tmp_path):
    """Issue 65: `restore JOB --to DS` (no --all) sent with no flags, so a raw job's keyless backup was
    sent decrypted and zfs refused it ("cannot receive: failed to read from stream"). It is the
    replication's stream with the hosts swapped now: raw, received encrypted; the files read back
    once the key is loaded."""
    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="512M")
    key = tmp_path / "k"
    key.write_bytes(os.urandom(32))
    sh("zfs", "create", "-o", "encryption=on", "-o", "keyformat=raw", "-o", f"keylocation=file://{key}",
       f"{src.name}/sec")
    write_random(os.path.join(mountpoint(f"{src.name}/sec"), "a"), 4, seed=1)
    want = manifest(mountpoint(f"{src.name}/sec"))
    cfg = cfg_for(tmp_path, backup_host, name="sec", source=f"{src.name}/sec", target=f"{dst.name}/sec", raw=True)
    assert rebal_json("replicate", "sec", config=cfg)["outcome"] == "ok"
    assert sh("zfs", "get", "-H", "-o", "value", "keystatus", f"{dst.name}/sec").stdout.strip() == "unavailable"
    to = f"{src.name}/one"
    plan = rebal_json("restore", "sec", "--at", "latest", "--to", to, "--dry-run", config=cfg)
    assert " -w " in " ".join(plan["planned"]), plan
    out = rebal_json("restore", "sec", "--at", "latest", "--to", to, config=cfg)
    assert out["bytes"] > 0 and any("load-key" in n for n in out["notes"]), out
    assert sh("zfs", "get", "-H", "-o", "value", "encryption", to).stdout.strip() != "off"
    sh("zfs", "load-key", "-L", f"file://{key}", to)
    sh("zfs", "mount", to)
    assert manifest(mountpoint(to)) == want


def test_a_tree_whose_datasets_have_different_newest_points_comes_back_whole(make_pool, backup_host, tmp_path):
    """Issue 64 on OpenZFS (where a dataset with nothing written gets no snapshot, so a tree's
    newest snapshots have different names): restore --all brought a child back at the tree's oldest
    shared name, without the file the backup holds, and the next replication pruned the child's
    newest backup, its only copy of that file. restorescenarios.older_point_scenario has the steps."""
    from restorescenarios import older_point_scenario

    src = make_pool([[]], size="512M")
    dst = make_pool([[]], size="1G")
    older_point_scenario(src, dst, backup_host, tmp_path)
