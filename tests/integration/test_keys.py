"""`rebal keys`: a first backup's ssh set up against a real sshd on loopback (its own, for this test):
the job's key made, the host key refused until its fingerprint is given, pinned, the gated line
installed over the admin's own login, and a dry run through the gate."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import rebal
from sshenv import start_sshd
from zfsenv import sh

# lane_long: CI's suite runs both on zfs-fuse; on OpenZFS the quick lane's gated key is test_lane_setups's wire
pytestmark = [pytest.mark.zfs, pytest.mark.lane, pytest.mark.lane_long]


def job_config(tmp_path, src, dst, host):
    """/etc/rebal of the test (empty: rebal keys makes the key) and a config with the job `nightly`
    of src/data into dst/fs/data on ``host``."""
    etc = tmp_path / "etc"
    etc.mkdir()
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "nightly"\n'
                   f'source = "{src.name}/data"\ntarget = "{dst.name}/fs/data"\ntarget_host = "{host.host}"\n'
                   f'target_port = {host.port}\nidentity_file = "{etc / "id"}"\nknown_hosts = "{etc / "kh"}"\n')
    return etc, cfg



def test_keys_from_nothing_to_a_dry_run_through_the_gate(make_pool, zfs_ready, tmp_path):
    src, dst = make_pool([[]], size="128M"), make_pool([[]], size="128M")
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "create", f"{dst.name}/fs")  # the empty dataset the gate receives under
    host = start_sshd(tmp_path / "bk")  # its authorized_keys holds the admin's own key (clientkey)
    try:
        etc, cfg = job_config(tmp_path, src, dst, host)
        first = rebal("keys", "nightly", config=cfg)
        assert "NOT pinned" in first.stdout and "made now" in first.stdout, first.stdout
        assert (etc / "id").exists() and os.stat(etc / "id").st_mode & 0o077 == 0
        assert not (etc / "kh").exists(), "a host key is never pinned on first sight"
        real = subprocess.run(["ssh-keygen", "-lf", str(host.dir / "hostkey.pub")], capture_output=True,
                              text=True).stdout.split()[1]  # read on the host itself
        r = rebal("keys", "nightly", "--pin", "SHA256:" + "A" * 43, config=cfg, check=False)
        assert r.returncode == 6 and "not pinned" in r.stderr and not (etc / "kh").exists(), r.stderr
        out = json.loads(rebal("keys", "nightly", "--pin", real, "--install", "--login-identity",
                               str(host.identity), "--authorized-keys", str(host.dir / "authorized_keys"),
                               "--rebal-path", "/usr/local/bin/rebal", "--json", config=cfg).stdout)
        assert out["pinned_now"] and out["installed"] is True and out["dry_run"] == "ok", out
        pub = (etc / "id.pub").read_text().strip()
        assert out["line"] == f'command="/usr/local/bin/rebal gate --receive-into {dst.name}/fs/data",restrict {pub}'
        assert out["line"] in (host.dir / "authorized_keys").read_text().splitlines()
        again = json.loads(rebal("keys", "nightly", "--install", "--login-identity", str(host.identity),
                                 "--authorized-keys", str(host.dir / "authorized_keys"), "--rebal-path",
                                 "/usr/local/bin/rebal", "--json", config=cfg).stdout)
        assert again["installed"] is False and again["pinned"] and not again["key_made"], again  # once only
        assert (host.dir / "authorized_keys").read_text().count(pub) == 1
        # the job's key is gated: it may not destroy what it backs up
        r = subprocess.run(["ssh", "-i", str(etc / "id"), "-o", f"UserKnownHostsFile={etc / 'kh'}", "-o", "BatchMode=yes",
                            "-p", str(host.port), f"root@{host.host}", f"zfs destroy -r {dst.name}/fs"],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "not allowed" in r.stderr, r.stderr
        assert sh("zfs", "list", "-H", "-o", "name", f"{dst.name}/fs").returncode == 0
        # the job runs through the gate on its own target (the first receive creates it)
        done = json.loads(rebal("replicate", "nightly", "--json", config=cfg).stdout)
        assert done["outcome"] == "ok", done
        # issue 63's attack, as written, through the line rebal keys installed: zfs send -p of a dataset
        # that would mount itself over a directory of the backup host's choosing, with setuid and devices
        evil = tmp_path / "pwned"
        sh("zfs", "create", "-o", f"mountpoint={evil}", "-o", "setuid=on", "-o", "devices=on", f"{src.name}/x")
        sh("zfs", "snapshot", f"{src.name}/x@s")
        sh("zfs", "unmount", f"{src.name}/x")
        stream = subprocess.run(["zfs", "send", "-p", f"{src.name}/x@s"], capture_output=True, check=True).stdout
        mounts_before = open("/proc/self/mounts").read().count(str(evil))
        r = subprocess.run(["ssh", "-i", str(etc / "id"), "-o", f"UserKnownHostsFile={etc / 'kh'}", "-o", "BatchMode=yes",
                            "-p", str(host.port), f"root@{host.host}", f"zfs receive {dst.name}/fs/data/x"],
                           input=stream, capture_output=True)
        assert r.returncode == 0, r.stderr  # under the job's own target: the data lands, its say does not
        got = sh("zfs", "get", "-H", "-o", "property,value,source", "mountpoint,setuid,devices",
                 f"{dst.name}/fs/data/x").stdout
        assert str(evil) not in got and "received" not in got, got
        assert open("/proc/self/mounts").read().count(str(evil)) == mounts_before == 0
    finally:
        host.stop()


def test_keys_says_what_it_did_when_the_key_is_still_refused(make_pool, zfs_ready, tmp_path):
    """Issue 69 (8): `--pin` then a refused login printed only "login refused", not that the key was
    pinned; `--install` into a file sshd does not read did not name the file; and a job that had run
    before was told "next: rebal replicate JOB (the first run)"."""
    src, dst = make_pool([[]], size="128M"), make_pool([[]], size="128M")
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "create", f"{dst.name}/fs")
    host = start_sshd(tmp_path / "bk")
    try:
        etc, cfg = job_config(tmp_path, src, dst, host)
        real = subprocess.run(["ssh-keygen", "-lf", str(host.dir / "hostkey.pub")], capture_output=True,
                              text=True).stdout.split()[1]
        r = rebal("keys", "nightly", "--pin", real, config=cfg, check=False)
        assert r.returncode == 6 and "pinned now" in r.stdout and "4. a dry run of the job: failed" in r.stdout, \
            (r.returncode, r.stdout, r.stderr)
        assert (etc / "kh").exists()
        elsewhere = host.dir / "not_read_by_sshd"
        r = rebal("keys", "nightly", "--install", "--login-identity", str(host.identity), "--authorized-keys",
                  str(elsewhere), "--rebal-path", "/usr/local/bin/rebal", config=cfg, check=False)
        assert r.returncode == 6 and f"added to root@{host.host}:{elsewhere}" in r.stdout, (r.stdout, r.stderr)
        assert "AuthorizedKeysFile" in r.stdout, r.stdout
        r = rebal("keys", "nightly", "--install", "--login-identity", str(host.identity), "--authorized-keys",
                  str(host.dir / "authorized_keys"), "--rebal-path", "/usr/local/bin/rebal", config=cfg)
        assert "(the first run)" in r.stdout, r.stdout
        assert json.loads(rebal("replicate", "nightly", "--json", config=cfg).stdout)["outcome"] == "ok"
        r = rebal("keys", "nightly", config=cfg)
        assert "the first run" not in r.stdout and "the job has run before" in r.stdout, r.stdout
    finally:
        host.stop()
