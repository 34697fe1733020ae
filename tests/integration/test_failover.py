"""Failover and failback (issue 68) on real pools over a real sshd: a pull job's backup served while
its file server is down, written there, then brought back. On zfs-fuse here (no written@, no clone
receive: what the file server wrote meanwhile cannot be kept, and the failback says so) and on
OpenZFS 2.4.4 in the lane (kept in POOL/rebal-diverged-..., bytes counted, a SIGKILL mid-send)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import rebal, rebal_json
from replscenarios import mountpoint
from sshenv import gate_key, ssh_as_job, start_sshd
from zfsenv import sh

pytestmark = [pytest.mark.zfs, pytest.mark.lane]

OPENZFS = shutil.which("zfs") is not None and subprocess.run(["zfs", "version"], capture_output=True).returncode == 0
MIB = 1 << 20


def prop(ds: str, name: str) -> str:
    return sh("zfs", "get", "-H", "-o", "value", name, ds).stdout.strip()


def write(path: str, size: int, seed: int) -> bytes:
    data = b"".join(bytes([seed % 251]) * 4096 + os.urandom(4096) for _ in range(size // 8192))  # half compressible
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data


def job_config(tmp_path, fs, src: str, dst: str, **extra: str) -> os.PathLike:
    cfg = tmp_path / "backup-host.toml"
    cfg.write_text(
        f'state_db = "{tmp_path / "backup-state.db"}"\n[[replicate]]\nname = "fo"\ndirection = "pull"\n'
        f'source_host = "{fs.host}"\nsource_port = {fs.port}\nidentity_file = "{fs.identity}"\n'
        f'known_hosts = "{fs.known_hosts}"\nsource = "{src}"\ntarget = "{dst}"\nrecursive = true\nkeep_base = true\n'
        + "".join(f"{k} = {v}\n" for k, v in extra.items()))
    return cfg


def test_fail_over_serve_from_the_backup_and_fail_back(make_pool, own_sshd, tmp_path):
    src = make_pool([[]], size="512M")
    dst = make_pool([[]], size="512M")
    data, backup = f"{src.name}/data", f"{dst.name}/fo"
    sh("zfs", "create", data)
    sh("zfs", "create", f"{data}/kid")
    first = write(os.path.join(mountpoint(data), "old.bin"), 2 * MIB, 1)
    write(os.path.join(mountpoint(data), "kid", "k.bin"), MIB, 2)
    cfg = job_config(tmp_path, own_sshd, data, backup)
    r1 = rebal_json("replicate", "fo", config=cfg)
    assert r1["outcome"] == "ok", r1

    # the file server is down: its sshd stopped; failover needs nothing of it
    own_sshd.stop()
    served = tmp_path / "served"
    before = {p: prop(backup, p) for p in ("readonly", "mountpoint", "mounted", "rebal:failover")}
    plan = rebal_json("failover", "fo", "--mountpoint-root", str(served), "--dry-run", config=cfg)
    assert any("rebal:failover" in s for s in plan["planned"]), plan
    assert {p: prop(backup, p) for p in before} == before  # a dry run changes nothing
    fo = rebal_json("failover", "fo", "--mountpoint-root", str(served), config=cfg)
    assert {d["name"]: d["mountpoint"] for d in fo["datasets"]} == {backup: str(served), f"{backup}/kid": f"{served}/kid"}
    assert all(d["mounted"] for d in fo["datasets"]), fo
    assert (served / "old.bin").read_bytes() == first
    new = write(str(served / "new.bin"), 4 * MIB, 3)  # written on the backup while it serves
    write(str(served / "kid" / "k.bin"), MIB, 4)
    sh("zfs", "create", f"{backup}/made")  # a dataset made while it serves
    write(os.path.join(mountpoint(f"{backup}/made"), "m.bin"), MIB, 5)
    again = rebal("replicate", "fo", config=cfg, check=False)  # the pull run refuses: it would receive over them
    assert again.returncode == 2 and "failed over" in again.stderr, again.stderr
    st = rebal_json("failback", "fo", "--status", config=cfg)
    assert st["failed_over"] and st["since"] == fo["since"], st
    down = rebal("failback", "fo", config=cfg, check=False)  # the file server still down: said, nothing frozen
    assert down.returncode != 0 and "Traceback" not in down.stderr, down.stderr
    write(str(served / "still.bin"), MIB, 9)  # the backup still serves, writable

    # the file server is back, and wrote something of its own meanwhile
    fs = start_sshd(own_sshd.dir, port=own_sshd.port)
    try:
        mine = write(os.path.join(mountpoint(data), "mine.bin"), 3 * MIB, 6)
        sh("zfs", "snapshot", f"{data}@admins-own")
        r = rebal("failback", "fo", "--dry-run", "--json", config=cfg, check=False)
        dry = json.loads(r.stdout)
        assert (r.returncode == 0) == OPENZFS, r.stderr  # (zfs-fuse: refused, said below)
        top = next(d for d in dry["datasets"] if d["server"] == data)
        assert top["diverged_snaps"] == ["admins-own"], top
        assert prop(data, "readonly") == "off" and prop(backup, "mounted") == "yes"  # a dry run changes nothing
        if not OPENZFS:  # no written@ here: what the file server wrote cannot be seen, nor kept
            r = rebal("failback", "fo", config=cfg, check=False)
            assert r.returncode != 0 and "--discard-diverged" in r.stdout + r.stderr, r.stdout + r.stderr
            assert os.path.exists(os.path.join(mountpoint(data), "mine.bin"))  # nothing rolled back
            back = rebal_json("failback", "fo", "--discard-diverged", config=cfg)
        else:
            back = rebal_json("failback", "fo", config=cfg)
        assert back["done"], back
        kinds = {d["server"]: d["kind"] for d in back["datasets"]}
        assert kinds == {data: "incremental", f"{data}/kid": "incremental", f"{data}/made": "full"}, kinds
        # the file server holds what was written on the backup
        assert open(os.path.join(mountpoint(data), "new.bin"), "rb").read() == new
        assert os.path.exists(os.path.join(mountpoint(f"{data}/made"), "m.bin"))
        sent = {d["server"]: d["bytes"] for d in back["datasets"]}
        assert sent[data] < len(new) + 2 * MIB, sent  # the changes, not the whole dataset (2 MiB more)
        if OPENZFS:  # what the file server wrote meanwhile is kept, readable, and named
            top = next(d for d in back["datasets"] if d["server"] == data)
            kept = top["kept"]
            assert kept.startswith(f"{src.name}/rebal-diverged-") and top["diverged"] >= MIB, top  # (compressed)
            assert open(os.path.join(mountpoint(kept), "mine.bin"), "rb").read() == mine
            assert prop(kept, "readonly") == "on"
            assert not os.path.exists(os.path.join(mountpoint(data), "mine.bin"))
        # the direction is back: the backup read-only, unmounted, unmarked; the file server writable
        assert prop(backup, "readonly") == "on" and prop(backup, "mounted") == "no"
        assert prop(backup, "rebal:failover") == "-" and prop(data, "readonly") == "off"
        r2 = rebal_json("replicate", "fo", config=cfg)
        assert r2["outcome"] == "ok", r2
        assert {d["kind"] for d in r2["datasets"]} <= {"incremental", "nothing", "unchanged"}, r2["datasets"]
        assert rebal_json("failback", "fo", "--status", config=cfg)["failback"]["done"]
    finally:
        fs.stop()


def test_a_failed_over_backup_takes_nothing_through_the_gate(make_pool, own_sshd, tmp_path):
    """The attacker holds the file server's gated key (with --allow-rollback): once the backup is
    failed over, a receive -F over what was written there, a new dataset under it and a snapshot
    are refused; before, the first rolled the backup's writes away."""
    src = make_pool([[]], size="256M")
    dst = make_pool([[]], size="256M")
    sh("zfs", "create", f"{dst.name}/g")
    sh("zfs", "create", f"{src.name}/x")
    sh("zfs", "snapshot", f"{src.name}/x@a")
    write(os.path.join(mountpoint(f"{src.name}/x"), "f.bin"), MIB, 7)
    sh("zfs", "snapshot", f"{src.name}/x@b")
    gate_key(own_sshd, f"--receive-into {dst.name}/g --allow-rollback", tmp_path / "gate.log")
    full = subprocess.run(["zfs", "send", f"{src.name}/x@a"], capture_output=True, check=True).stdout
    assert ssh_as_job(own_sshd, f"zfs receive {dst.name}/g/x", input=full).returncode == 0
    cfg = tmp_path / "b.toml"
    cfg.write_text(f'state_db = "{tmp_path / "b.db"}"\n[[replicate]]\nname = "g"\ndirection = "pull"\n'
                   f'source_host = "fileserver.invalid"\nsource = "{src.name}/x"\ntarget = "{dst.name}/g/x"\n')
    rebal_json("failover", "g", config=cfg)
    served = mountpoint(f"{dst.name}/g/x")
    write(os.path.join(served, "written-on-the-backup.bin"), MIB, 8)
    incr = subprocess.run(["zfs", "send", "-i", "@a", f"{src.name}/x@b"], capture_output=True, check=True).stdout
    r = ssh_as_job(own_sshd, f"zfs receive -F {dst.name}/g/x", input=incr)
    assert r.returncode != 0 and b"failed over" in r.stderr, r.stderr
    assert os.path.exists(os.path.join(served, "written-on-the-backup.bin"))
    r = ssh_as_job(own_sshd, f"zfs receive {dst.name}/g/x/sneaked", input=full)
    assert r.returncode != 0 and b"failed over" in r.stderr, r.stderr
    assert subprocess.run(["zfs", "list", f"{dst.name}/g/x/sneaked"], capture_output=True).returncode != 0
    r = ssh_as_job(own_sshd, f"zfs snapshot {dst.name}/g/x@rebal-g-20260101T000000Z")
    assert r.returncode != 0 and b"failed over" in r.stderr, r.stderr
    assert ssh_as_job(own_sshd, f"zfs list -H -o name {dst.name}/g/x").returncode == 0  # reading stays allowed
    assert "refused" in (tmp_path / "gate.log").read_text()


@pytest.mark.skipif(not OPENZFS, reason="a cut failback resumes from its receive token: OpenZFS (zfs-fuse has none)")
def test_a_killed_failback_goes_on_from_where_it_was_cut(make_pool, own_sshd, tmp_path):
    src = make_pool([[]], size="512M")
    dst = make_pool([[]], size="512M")
    data, backup = f"{src.name}/data", f"{dst.name}/fo"
    sh("zfs", "create", data)
    write(os.path.join(mountpoint(data), "a.bin"), MIB, 1)
    cfg = job_config(tmp_path, own_sshd, data, backup, bwlimit='"4M"')  # (16 s for what follows)
    rebal_json("replicate", "fo", config=cfg)
    rebal_json("failover", "fo", config=cfg)
    big = os.urandom(64 * MIB)  # incompressible: the stream is as long as the file
    with open(os.path.join(mountpoint(backup), "big.bin"), "wb") as f:
        f.write(big)
    p = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "failback", "fo"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tmp_path / "backup-state.db"
    deadline = time.monotonic() + 300
    moved = 0
    while moved < 4 * MIB and p.poll() is None and time.monotonic() < deadline:  # the send is under way
        with sqlite3.connect(db) as c:
            row = c.execute("SELECT progress FROM runs WHERE kind = 'failback' ORDER BY id DESC LIMIT 1").fetchone() \
                if c.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone() else None
        moved = (row[0] or 0) if row else 0
        time.sleep(0.2)  # (polling the run's own progress record, not waiting for time to pass)
    assert p.poll() is None and moved >= 4 * MIB, (moved, p.poll())
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 120  # the file server's receive sees the end of its stream after rebal died
    while prop(data, "receive_resume_token") in ("-", "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert prop(data, "receive_resume_token") not in ("-", ""), "the cut send left no token"
    back = rebal_json("failback", "fo", config=cfg)
    assert back["done"] and back["datasets"][0]["kind"] == "resumed", back
    assert back["datasets"][0]["bytes"] < 64 * MIB, back  # only what the cut send had not moved
    assert open(os.path.join(mountpoint(data), "big.bin"), "rb").read() == big
    assert json.loads(rebal("replicate", "fo", "--json", config=cfg).stdout)["outcome"] == "ok"


@pytest.mark.lane_long  # the suite runs it on zfs-fuse (CI's time: the quick lane leaves it to the full lane)
def test_a_push_told_to_roll_back_a_failed_over_backup_refuses(make_pool, own_sshd, tmp_path):
    """An ungated push job whose admin names --force-rollback, not knowing the backup host serves
    the data now: what was written there stays."""
    src = make_pool([[]], size="256M")
    dst = make_pool([[]], size="256M")
    sh("zfs", "create", f"{src.name}/x")
    write(os.path.join(mountpoint(f"{src.name}/x"), "a.bin"), MIB, 1)
    push = tmp_path / "fileserver.toml"
    push.write_text(f'state_db = "{tmp_path / "fs.db"}"\n' + own_sshd.config_block(
        name="p", source=f"{src.name}/x", target=f"{dst.name}/x"))
    assert rebal_json("replicate", "p", config=push)["outcome"] == "ok"
    back = tmp_path / "backup.toml"
    back.write_text(f'state_db = "{tmp_path / "bk.db"}"\n[[replicate]]\nname = "p"\ndirection = "pull"\n'
                    f'source_host = "fileserver.invalid"\nsource = "{src.name}/x"\ntarget = "{dst.name}/x"\n')
    rebal_json("failover", "p", config=back)
    write(os.path.join(mountpoint(f"{dst.name}/x"), "served.bin"), MIB, 2)
    write(os.path.join(mountpoint(f"{src.name}/x"), "b.bin"), MIB, 3)
    r = rebal("replicate", "p", "--force-rollback", f"{dst.name}/x", "--json", config=push, check=False)
    assert r.returncode != 0 and "failed over" in r.stdout, r.stdout + r.stderr
    assert os.path.exists(os.path.join(mountpoint(f"{dst.name}/x"), "served.bin"))


@pytest.mark.skipif(not OPENZFS, reason="a send's size (zfs send -nP) is asked of OpenZFS; zfs-fuse cannot say it")
@pytest.mark.lane_long  # CI's time; the quick set's rewrite -P test asks the same estimate
def test_a_failback_that_does_not_fit_changes_nothing_on_the_file_server(make_pool, own_sshd, tmp_path):
    src = make_pool([[]], size="256M")
    dst = make_pool([[]], size="1G")
    data, backup = f"{src.name}/data", f"{dst.name}/fo"
    sh("zfs", "create", data)
    write(os.path.join(mountpoint(data), "a.bin"), MIB, 1)
    cfg = job_config(tmp_path, own_sshd, data, backup)
    rebal_json("replicate", "fo", config=cfg)
    rebal_json("failover", "fo", config=cfg)
    with open(os.path.join(mountpoint(backup), "big.bin"), "wb") as f:  # more than the file server's pool holds
        for _ in range(300):
            f.write(os.urandom(MIB))
    r = rebal("failback", "fo", config=cfg, check=False)
    assert r.returncode != 0 and "free" in r.stderr and "make room" in r.stderr, r.stderr
    assert prop(data, "readonly") == "off"  # nothing changed on the file server
    assert not os.path.exists(os.path.join(mountpoint(data), "big.bin"))
    assert rebal_json("failback", "fo", "--status", config=cfg)["failed_over"]  # still served from the backup
