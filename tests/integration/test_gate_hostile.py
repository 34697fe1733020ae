"""The gate against a broken-into file server (issue 63): each test plays the attacker holding the
file server's gated key, on real pools (zfs-fuse here, OpenZFS 2.4.4 in the lane), real rsync and a
real sshd on loopback, and asserts that the backup host is left as it was. Each failed before its fix.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rebal
from replscenarios import mountpoint
from sshenv import gate_key, ssh_as_job
from zfsenv import sh

pytestmark = [pytest.mark.zfs, pytest.mark.lane]

RELAY = Path(__file__).resolve().parent.parent / "gate_relay.py"
OPENZFS = shutil.which("zfs") is not None and subprocess.run(["zfs", "version"], capture_output=True).returncode == 0


def props(ds: str, names: str) -> dict[str, tuple[str, str]]:
    r = sh("zfs", "get", "-H", "-o", "property,value,source", names, ds)
    return {p: (v, s) for p, v, s in (row.split("\t") for row in r.stdout.splitlines())}


def mounted_at(path: str) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


@pytest.fixture
def pools(make_pool):
    src = make_pool([[]], size="128M")
    dst = make_pool([[]], size="128M")
    sh("zfs", "create", f"{dst.name}/g")  # the gate's root, as docs/first-backup.md makes it
    return src, dst


UNSAFE = "mountpoint,canmount,setuid,devices,exec"


def test_a_stream_that_would_mount_itself_anywhere_changes_nothing_on_the_backup_host(pools, own_sshd, tmp_path):
    """`zfs send -p` of a dataset with mountpoint=/elsewhere setuid=on devices=on exec=on, piped into
    the gate's zfs receive: the backup host's mount table and the received dataset's effective
    properties are what the gate's root gives it, never what the stream says."""
    src, dst = pools
    evil = tmp_path / "pwned"
    sh("zfs", "create", "-o", f"mountpoint={evil}", "-o", "setuid=on", "-o", "devices=on", "-o", "exec=on",
       "-o", "canmount=on", f"{src.name}/x")
    (evil / "authorized_keys").write_text("ssh-ed25519 AAAA attacker\n")
    sh("zfs", "snapshot", f"{src.name}/x@s")
    sh("zfs", "unmount", f"{src.name}/x")
    os.rmdir(evil) if evil.exists() and not any(evil.iterdir()) else None
    extra = ["overlay"] if OPENZFS else []
    if OPENZFS:
        sh("zfs", "set", "overlay=on", f"{src.name}/x")
        sh("zfs", "snapshot", f"{src.name}/x@s2")
    gate_key(own_sshd, f"--receive-into {dst.name}/g", tmp_path / "gate.log")
    root_before = props(f"{dst.name}/g", UNSAFE)
    stream = subprocess.run(["zfs", "send", "-p", f"{src.name}/x@{'s2' if OPENZFS else 's'}"], capture_output=True,
                            check=True).stdout
    r = ssh_as_job(own_sshd, f"zfs receive {dst.name}/g/x", input=stream)
    assert r.returncode == 0, r.stderr  # the data is backed up; only its say over the backup host is gone
    got = props(f"{dst.name}/g/x", ",".join([UNSAFE, *extra]))
    assert not mounted_at(str(evil)) and not (evil / "authorized_keys").exists(), got
    assert got["mountpoint"][0] == f"{mountpoint(dst.name + '/g')}/x", got
    for p in [*UNSAFE.split(","), *extra]:
        if p == "canmount":  # not inheritable: zfs-fuse keeps the stream's "on", which is the default anyway
            assert got[p][0] == "on" and got[p][1] != "local", got
            continue
        assert got[p][1] != "received" and got[p][1] != "local", (p, got)
    assert props(f"{dst.name}/g", UNSAFE) == root_before
    # the stream's values are still recorded: a restore gives them back to the file server
    if OPENZFS:
        rec = sh("zfs", "get", "-H", "-o", "received", "mountpoint", f"{dst.name}/g/x").stdout.strip()
        assert rec == str(evil), rec


def _rsync_through_gate(gate_args: list[str], src: Path, dest: str, flags: list[str], swap: str = "",
                        swap_to: str = "") -> subprocess.CompletedProcess:
    gate = [sys.executable, "-m", "rebal", "gate", *gate_args]
    env = dict(os.environ, GATE_ARGV=json.dumps(gate), SWAP=swap, SWAP_TO=swap_to)
    return subprocess.run(["rsync", *flags, "-e", f"{sys.executable} {RELAY}", f"{src}/", f"fileserver:{dest}"],
                          capture_output=True, text=True, env=env, timeout=300)


def test_rsync_writes_where_the_gate_checked_even_when_the_directory_is_swapped(pools, tmp_path):
    """Two connections through one gate: the second swaps the first's checked destination for a
    symlink out of the mount point between the gate's check and rsync's use of it. Nothing is
    written outside; what was sent lands in the directory that was checked."""
    _, dst = pools
    mp = mountpoint(f"{dst.name}/g")
    os.mkdir(f"{mp}/victim")
    outside = tmp_path / "outside"
    outside.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "planted").write_text("from the attacker\n")
    r = _rsync_through_gate(["--receive-into", f"{dst.name}/g", "--log", str(tmp_path / "gate.log")], src,
                            f"{mp}/victim/", ["-rlptHAX", "--numeric-ids"], swap=f"{mp}/victim", swap_to=str(outside))
    assert list(outside.iterdir()) == [], (r.returncode, r.stderr, list(outside.iterdir()))
    assert os.path.islink(f"{mp}/victim")
    assert r.returncode == 0, r.stderr
    assert Path(f"{mp}/victim.moved/planted").read_text() == "from the attacker\n"


def test_rsync_through_the_gate_makes_no_device_nor_setuid_program(pools, tmp_path):
    """A sender asks for a block device open to all, a setuid-root program and a file capability:
    -D is refused outright, and on a mount that honours setuid (zfs-fuse's, or setuid=on) the bits and
    the capability are not set, while the files' data and other modes are kept."""
    _, dst = pools
    mp = mountpoint(f"{dst.name}/g")
    src = tmp_path / "src"
    src.mkdir()
    os.mknod(src / "disk", 0o666 | stat.S_IFBLK, os.makedev(8, 0))
    shutil.copy("/bin/true", src / "rootshell")
    os.chmod(src / "rootshell", 0o4755)
    shutil.copy("/bin/true", src / "capped")
    caps = subprocess.run(["setcap", "cap_setuid+ep", str(src / "capped")], capture_output=True).returncode == 0
    gate = ["--receive-into", f"{dst.name}/g", "--log", str(tmp_path / "gate.log")]
    devices = _rsync_through_gate(gate, src, f"{mp}/d1/", ["-aHAX", "--numeric-ids", "--mkpath"])
    assert devices.returncode != 0 and not os.path.exists(f"{mp}/d1/disk"), devices.stderr
    assert "-D" in (tmp_path / "gate.log").read_text() or "not allowed" in devices.stderr, devices.stderr
    r = _rsync_through_gate(gate, src, f"{mp}/d2/", ["-rlptgoHAX", "--numeric-ids", "--mkpath"])
    assert r.returncode == 0, r.stderr
    st = os.stat(f"{mp}/d2/rootshell")
    nosuid = bool(os.statvfs(mp).f_flag & os.ST_NOSUID)
    assert nosuid or not st.st_mode & (stat.S_ISUID | stat.S_ISGID), oct(st.st_mode)
    assert st.st_mode & 0o777 == 0o755 and not os.path.exists(f"{mp}/d2/disk")
    if caps and not nosuid:
        got = subprocess.run(["getcap", f"{mp}/d2/capped"], capture_output=True, text=True).stdout
        assert "cap_setuid" not in got, got


def test_a_send_gate_refuses_a_snapshot_flood_and_holds_on_the_admins_snapshots(pools, tmp_path):
    """A broken-into backup host holding a pull job's key: only rebal's own snapshot names, at most
    --max-snapshots of them per dataset, and holds only on rebal's own snapshots (a hold on the
    admin's would keep them from being destroyed)."""
    src, _ = pools
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "snapshot", f"{src.name}/data@admins")
    gate = ["gate", "--send-from", f"{src.name}/data", "--max-snapshots", "2", "--log", str(tmp_path / "g.log")]
    made = []
    for i in range(3):
        snap = f"{src.name}/data@rebal-j-2026120{i + 1}T000000Z"
        r = rebal(*gate, "--command", f"zfs snapshot {snap}", check=False)
        made.append(r.returncode)
    assert made == [0, 0, 2], made
    listed = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", f"{src.name}/data").stdout.split()
    assert len([s for s in listed if "@rebal-" in s]) == 2
    for line in (f"zfs snapshot {src.name}/data@any", f"zfs hold rebal-j {src.name}/data@admins"):
        r = rebal(*gate, "--command", line, check=False)
        assert r.returncode == 2 and "rebal gate: refused" in r.stderr, (line, r.stderr)
    if OPENZFS:
        assert sh("zfs", "holds", "-H", f"{src.name}/data@admins").stdout.strip() == ""
