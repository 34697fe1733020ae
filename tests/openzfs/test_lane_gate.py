"""No root needed (issue 13), on real OpenZFS: an unprivileged user `rebalu` on both ends, with only
the `zfs allow` sets the README gives, runs a push through the gate (full, incremental, a cut send
resumed from its token) and a pull through the gate; a missing permission fails clearly. Runs in the
lane's guest; the gate's refusals and the pull on zfs-fuse are in tests/integration/test_gate.py."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time

import pytest
from fsenv import manifest
from lanelib import write_random
from replscenarios import backup_root, mountpoint, snaps
from sshenv import gate_key, start_sshd
from zfsenv import sh

pytestmark = [pytest.mark.openzfs, pytest.mark.lane_long]

USER = "rebalu"
# the permission sets of the README's "Securing backups" (no root on either end)
PUSH_SOURCE = "send,snapshot,hold,release,bookmark,destroy,mount"
PUSH_TARGET = "receive,create,mount,readonly"
PULL_SOURCE = PUSH_SOURCE
PULL_TARGET = "receive,create,mount,readonly,destroy"


@pytest.fixture
def user():
    """The user, and a directory it can read (pytest's tmp_path is 0700 root: sshd reads the
    authorized_keys as the user logging in, and the user runs rebal from here)."""
    from pathlib import Path

    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        sh("useradd", "-m", "-s", "/bin/sh", USER)
    sh("usermod", "-p", "*", USER)  # no password, but not locked: sshd (UsePAM no) refuses locked accounts
    base = Path(f"/var/tmp/rebal-lane-gate-{os.getpid()}")
    shutil.rmtree(base, ignore_errors=True)
    (base / "u").mkdir(parents=True)
    os.chmod(base, 0o755)
    pw = pwd.getpwnam(USER)
    os.chown(base / "u", pw.pw_uid, pw.pw_gid)
    yield base, pw
    shutil.rmtree(base, ignore_errors=True)


def as_user(home, argv, **kw):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(home), "LC_ALL": "C.UTF-8"}
    return subprocess.run(["runuser", "-u", USER, "--", *argv], capture_output=True, text=True, env=env, **kw)


def rebal_as_user(home, cfg, *args, check=True):
    r = as_user(home, [sys.executable, "-m", "rebal", "--config", str(cfg), *args])
    if check:
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


def host_for_user(base, home, pw):
    """An sshd on loopback where `rebalu` logs in with its own key (the job's key, gated)."""
    host = start_sshd(base / "sshd")
    os.chmod(base / "sshd", 0o755)
    for f in ("clientkey", "known_hosts"):
        shutil.copy(host.dir / f, home / f)
        os.chown(home / f, pw.pw_uid, pw.pw_gid)
    return host


def cfg_block(host, home, **job) -> str:
    lines = ["[[replicate]]"] + [f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {str(v).lower()}"
                                 for k, v in job.items()]
    lines += [f'identity_file = "{home / "clientkey"}"', f'known_hosts = "{home / "known_hosts"}"']
    return "\n".join(lines) + "\n"


def test_unprivileged_push_and_pull_through_gates(make_pool, user):
    base, pw = user
    home = base / "u"
    src = make_pool([[]], size="1G")
    dst = make_pool([[]], size="1G")
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "set", "compression=off", f"{src.name}/data")
    sh("zfs", "create", f"{dst.name}/push")
    sh("zfs", "create", f"{dst.name}/pull")
    sh("zfs", "allow", "-u", USER, PUSH_SOURCE, f"{src.name}/data")
    sh("zfs", "allow", "-u", USER, PUSH_TARGET, f"{dst.name}/push")
    sh("zfs", "allow", "-u", USER, PULL_TARGET, f"{dst.name}/pull")
    host = host_for_user(base, home, pw)
    log = home / "gate.log"
    log.touch()
    os.chown(log, pw.pw_uid, pw.pw_gid)
    try:
        gate_key(host, f"--receive-into {dst.name}/push", log)
        cfg = home / "config.toml"
        cfg.write_text(f'state_db = "{home / "state.db"}"\n' + cfg_block(
            host, home, name="up", source=f"{src.name}/data", target=f"{dst.name}/push/data",
            target_host=host.host, target_port=host.port, target_user=USER, bwlimit="40M"))
        os.chown(cfg, pw.pw_uid, pw.pw_gid)
        root = mountpoint(f"{src.name}/data")
        write_random(os.path.join(root, "big.bin"), 200)
        sh("zpool", "sync", src.name)
        # a cut send: killed after 60 MiB, resumed from the token by the next run (through the gate)
        out = open(home / "cut-run.out", "wb")
        p = subprocess.Popen(["runuser", "-u", USER, "--", sys.executable, "-m", "rebal", "--config", str(cfg),
                              "replicate", "up", "--json"], stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + 300
        while True:  # bounded polling of the run's recorded progress
            r = rebal_as_user(home, cfg, "runs", "--limit", "1", "--json", check=False)
            runs = json.loads(r.stdout or '{"runs": []}')["runs"] if r.returncode == 0 else []
            if runs and (runs[0]["progress"] or 0) >= 60 << 20:
                break
            assert p.poll() is None and time.monotonic() < deadline, (
                "the send ended before it could be cut", (home / "cut-run.out").read_text()[-3000:], log.read_text()[-2000:])
            time.sleep(0.2)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        deadline = time.monotonic() + 60
        tok = "-"
        while tok in ("-", "") and time.monotonic() < deadline:
            tok = sh("zfs", "get", "-H", "-o", "value", "receive_resume_token", f"{dst.name}/push/data",
                     check=False).stdout.strip()
            time.sleep(0.2)
        assert tok not in ("-", ""), "no resume token saved"
        r1 = json.loads(rebal_as_user(home, cfg, "replicate", "up", "--json").stdout)
        assert r1["outcome"] == "ok", r1
        assert r1["resumed"] and r1["datasets"][0]["kind"] == "resumed", r1
        with open(os.path.join(root, "more"), "wb") as f:
            f.write(os.urandom(3 << 20))
        r2 = json.loads(rebal_as_user(home, cfg, "replicate", "up", "--json").stdout)
        assert r2["outcome"] == "ok" and r2["datasets"][0]["kind"] == "incremental", r2
        assert r2["datasets"][0]["cursor"] == "bookmark", (r2["datasets"], r2["notes"])
        # the run before resumed the cut snapshot and kept it as its base; once sent past, it goes
        left = [x for x in snaps(f"{src.name}/data") if x.startswith("rebal-up-")]
        assert left == [], (left, r2["notes"], r2["pruned_source"])
        assert manifest(root) == manifest(backup_root(f"{dst.name}/push/data"))
        sh("zfs", "umount", f"{dst.name}/push/data")
        assert sh("zfs", "get", "-H", "-o", "value", "readonly", f"{dst.name}/push/data").stdout.strip() == "on"
        assert "refused" not in log.read_text()

        # a missing permission fails clearly: take `receive` away on the target
        sh("zfs", "unallow", "-u", USER, "receive", f"{dst.name}/push")
        with open(os.path.join(root, "more2"), "wb") as f:
            f.write(os.urandom(1 << 20))
        r = rebal_as_user(home, cfg, "replicate", "up", "--json", check=False)
        out = json.loads(r.stdout)
        assert r.returncode == 1 and out["outcome"] == "failed", out
        assert "permission" in out["error"].lower(), out["error"]
        sh("zfs", "allow", "-u", USER, "receive", f"{dst.name}/push")

        # pull: the backup host's job (as rebalu) fetches through a gate on the file server
        gate_key(host, f"--send-from {src.name}/data", log)
        cfg2 = home / "pull.toml"
        cfg2.write_text(f'state_db = "{home / "state2.db"}"\n' + cfg_block(
            host, home, name="down", direction="pull", source=f"{src.name}/data", target=f"{dst.name}/pull/data",
            source_host=host.host, source_port=host.port, source_user=USER))
        os.chown(cfg2, pw.pw_uid, pw.pw_gid)
        p1 = json.loads(rebal_as_user(home, cfg2, "replicate", "down", "--json").stdout)
        assert p1["outcome"] == "ok" and p1["datasets"][0]["kind"] == "full", p1
        with open(os.path.join(root, "more3"), "wb") as f:
            f.write(os.urandom(1 << 20))
        p2 = json.loads(rebal_as_user(home, cfg2, "replicate", "down", "--json").stdout)
        assert p2["outcome"] == "ok" and p2["datasets"][0]["kind"] == "incremental", p2
        assert p2["datasets"][0]["base_bookmark"], p2
        # nothing new (and no file read since: reading would write atimes): through the gate (zpool sync
        # of its pool, then written#) the dataset sits the run out
        p3 = json.loads(rebal_as_user(home, cfg2, "replicate", "down", "--json").stdout)
        assert p3["outcome"] == "ok" and p3["datasets"][0]["kind"] == "unchanged" and p3["snapshot"] == "", (
            p3["datasets"], p3["notes"])
        assert not [s for s in snaps(f"{src.name}/data") if s.startswith("rebal-down-")], "the source keeps none"
        assert manifest(root) == manifest(backup_root(f"{dst.name}/pull/data"))
    finally:
        host.stop()


def test_a_key_that_may_only_append(make_pool, user):
    """Issue 49: the set `rebal gate --allow-for` prints for OpenZFS 2.4 has receive:append, not
    receive. Through the gate the key receives full and incremental sends; ZFS itself refuses it a
    rollback, a destroy and a receive -F (which the old set, receive, lets through: asserted too);
    `rebal replicate --force-rollback` says why in one line."""
    base, pw = user
    home = base / "u"
    src = make_pool([[]], size="1G")
    dst = make_pool([[]], size="1G")
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "create", f"{dst.name}/app")
    sh("zfs", "allow", "-u", USER, PUSH_SOURCE, f"{src.name}/data")
    shown = subprocess.run([sys.executable, "-m", "rebal", "gate", "--receive-into", f"{dst.name}/app", "--allow-for",
                            USER], capture_output=True, text=True, check=True).stdout
    allow = [ln.split() for ln in shown.splitlines() if ln.startswith("zfs allow")]
    assert allow == [["zfs", "allow", "-u", USER, "receive:append,create,mount,readonly", f"{dst.name}/app"]], shown
    sh(*allow[0])
    host = host_for_user(base, home, pw)
    log = home / "gate.log"
    log.touch()
    os.chown(log, pw.pw_uid, pw.pw_gid)
    backup = f"{dst.name}/app/data"
    try:
        gate_key(host, f"--receive-into {dst.name}/app", log)
        cfg = home / "config.toml"
        cfg.write_text(f'state_db = "{home / "state.db"}"\n' + cfg_block(
            host, home, name="ap", source=f"{src.name}/data", target=backup,
            target_host=host.host, target_port=host.port, target_user=USER))
        os.chown(cfg, pw.pw_uid, pw.pw_gid)
        root = mountpoint(f"{src.name}/data")
        write_random(os.path.join(root, "a.bin"), 4)
        r1 = json.loads(rebal_as_user(home, cfg, "replicate", "ap", "--json").stdout)
        assert r1["outcome"] == "ok" and r1["datasets"][0]["kind"] == "full", r1
        write_random(os.path.join(root, "b.bin"), 4, seed=1)
        r2 = json.loads(rebal_as_user(home, cfg, "replicate", "ap", "--json").stdout)
        assert r2["outcome"] == "ok" and r2["datasets"][0]["kind"] == "incremental", r2
        kept = snaps(backup)
        assert len(kept) >= 2, kept

        # ZFS refuses this user a rollback and a destroy of the backup's snapshots
        for argv in (["zfs", "rollback", "-r", f"{backup}@{kept[0]}"], ["zfs", "destroy", f"{backup}@{kept[0]}"]):
            r = as_user(home, argv)
            assert r.returncode != 0 and "permission denied" in r.stderr.lower(), (argv, r.stderr)
        # and a receive -F that would destroy a snapshot taken on the backup since (a stream the user
        # may send: from the base both sides share to a new snapshot of the source)
        sh("zfs", "snapshot", f"{backup}@on-the-backup")
        sh("zfs", "snapshot", f"{src.name}/data@n3")
        have = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot,bookmark", "-r", f"{src.name}/data").stdout.split()
        base_ref = next(n for n in have if n.endswith(("@" + kept[-1], "#" + kept[-1])))  # the cursor
        pipe = f"zfs send -i {base_ref} {src.name}/data@n3 | zfs receive -u -F {backup}"
        r = as_user(home, ["sh", "-c", pipe])
        assert r.returncode != 0 and "permission denied" in r.stderr.lower(), r.stderr
        assert "on-the-backup" in snaps(backup)

        # --force-rollback through the gate: one line that names the permission
        write_random(os.path.join(root, "c.bin"), 1, seed=2)
        rf = rebal_as_user(home, cfg, "replicate", "ap", "--force-rollback", backup, "--json", check=False)
        out = json.loads(rf.stdout)
        assert rf.returncode == 1 and out["outcome"] == "failed", out
        assert "receive:append" in out["error"] and "\n" not in out["error"], out["error"]
        assert "on-the-backup" in snaps(backup)

        # the same receive -F with the old set (receive) goes through: what receive:append stopped
        sh("zfs", "allow", "-u", USER, "receive", f"{dst.name}/app")
        r = as_user(home, ["sh", "-c", pipe])
        assert r.returncode == 0, r.stderr
        assert "on-the-backup" not in snaps(backup) and "n3" in snaps(backup)
    finally:
        host.stop()
