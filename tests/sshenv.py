"""A real sshd on loopback (or inside a network namespace) with a key pair and a pinned host key made
for the test run: the backup host of the replication tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class BackupHost:
    host: str
    port: int
    dir: Path
    identity: Path
    known_hosts: Path
    proc: subprocess.Popen

    def config_block(self, **extra) -> str:
        lines = [
            "[[replicate]]",
            f'target_host = "{self.host}"',
            f"target_port = {self.port}",
            f'identity_file = "{self.identity}"',
            f'known_hosts = "{self.known_hosts}"',
        ]
        for k, v in extra.items():
            if isinstance(v, bool):
                lines.append(f"{k} = {'true' if v else 'false'}")
            elif isinstance(v, (int, float)):
                lines.append(f"{k} = {v}")
            elif isinstance(v, dict):
                continue
            elif isinstance(v, list):
                lines.append(f"{k} = {json.dumps(v)}")
            else:
                lines.append(f'{k} = "{v}"')
        for k, v in extra.items():
            if isinstance(v, dict):
                lines.append(f"[replicate.{k}]")
                lines += [f"{a} = {b}" for a, b in v.items()]
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(d: Path, host: str = "127.0.0.1", port: int | None = None, netns: str | None = None) -> BackupHost:
    """sshd on ``host``: on ``port``, or on a free one, drawn again where another process took it
    between the draw and sshd's bind (the suite runs three tests at once)."""
    if port is not None:
        return _start_sshd(d, host, port, netns)
    for _ in range(2):
        try:
            return _start_sshd(d, host, free_port(), netns)
        except RuntimeError as e:
            if "Address already in use" not in str(e):
                raise
    return _start_sshd(d, host, free_port(), netns)


def _start_sshd(d: Path, host: str, port: int, netns: str | None) -> BackupHost:
    d.mkdir(parents=True, exist_ok=True)
    for key in ("hostkey", "clientkey"):
        if not (d / key).exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "clientkey.pub", d / "authorized_keys")
    hostpub = (d / "hostkey.pub").read_text().split()
    (d / "known_hosts").write_text(f"[{host}]:{port} {hostpub[0]} {hostpub[1]}\n")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress {host}\nHostKey {d / 'hostkey'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nStrictModes no\nPidFile {d / 'sshd.pid'}\nMaxStartups 100\nMaxSessions 100\n"
        "ClientAliveInterval 2\nClientAliveCountMax 3\n"
    )
    if _takes_penalties_no(d / "sshd_config"):
        with open(d / "sshd_config", "a") as f:
            f.write("PerSourcePenalties no\n")
    argv = ["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")]
    if netns:
        argv = ["ip", "netns", "exec", netns] + argv
    log = open(d / "sshd.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=log)
    # wait until it accepts connections (a readiness check of a server we started, bounded)
    deadline = time.monotonic() + 60  # a bound: under TCG with other guests beside it, 10 s was seen too short
    while not _greets(host, port):
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(d / 'sshd.log').read_text()[-500:]}")
        if time.monotonic() > deadline:
            proc.terminate()
            raise RuntimeError(f"sshd did not come up in 60 s: {(d / 'sshd.log').read_text()[-500:]}")
        time.sleep(0.05)
    return BackupHost(host, port, d, d / "clientkey", d / "known_hosts", proc)


_PENALTIES: dict[str, bool] = {}


def _takes_penalties_no(config: Path) -> bool:
    """Whether this sshd knows PerSourcePenalties (OpenSSH 9.8 and later, the lane guest's 10.0):
    there it is on by default and shuts out an address that hung up before logging in too often:
    the readiness probes and the attacker tests' refused clients add up to its 15 s, and the next
    test's own login is closed at once ("Connection closed by 127.0.0.1"; CI's lane lost two tests
    so). Asked once of `sshd -t` with the line added."""
    if "sshd" not in _PENALTIES:
        trial = config.with_name("sshd_config.trial")
        trial.write_text(config.read_text() + "PerSourcePenalties no\n")
        _PENALTIES["sshd"] = subprocess.run(["/usr/sbin/sshd", "-t", "-f", str(trial)],
                                            capture_output=True).returncode == 0
        trial.unlink()
    return _PENALTIES["sshd"]


def _greets(host: str, port: int) -> bool:
    """sshd is up once it sends its banner on a connection (refused or silent: not yet). A probe
    that gives up mid-handshake (ssh-keyscan -T 1 under load) is what the penalties count."""
    try:
        with socket.create_connection((host, port), timeout=10) as s:
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def sshd_problem() -> str | None:
    if not os.path.exists("/usr/sbin/sshd"):
        return "openssh-server is not installed (bash scripts/setup.sh installs it)"
    if not shutil.which("rsync"):
        return "rsync is not installed"
    return None


def gate_key(host: BackupHost, gate_args: str, log: Path) -> None:
    """Make the test key a gated one, as the README tells an admin to: a forced command with
    `restrict` in authorized_keys (sshd reads the file at each login)."""
    import shlex
    import sys

    pub = (host.dir / "clientkey.pub").read_text().strip()
    cmd = f"{shlex.quote(sys.executable)} -m rebal gate {gate_args} --log {shlex.quote(str(log))}"
    (host.dir / "authorized_keys").write_text(f'command="{cmd}",restrict {pub}\n')


def ssh_as_job(host: BackupHost, command: str, input: bytes = b"") -> subprocess.CompletedProcess:
    """Run ``command`` on the backup host with the job's key, as a compromised file server would."""
    return subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={host.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
         "-i", str(host.identity), "-o", "IdentitiesOnly=yes", "-p", str(host.port), "-l", "root", host.host, command],
        input=input, capture_output=True, timeout=60)


def logged_key(host: BackupHost, log: Path) -> None:
    """The test key runs whatever it asks for, and every command line it sends is written to ``log``
    first (a forced command, as an admin would audit a key): which host did what is then seen, even
    though both hosts of a loopback test are this machine."""
    wrapper = host.dir / "logshell.sh"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$SSH_ORIGINAL_COMMAND" >> "{log}"\n'
                       'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
    wrapper.chmod(0o755)
    pub = (host.dir / "clientkey.pub").read_text().strip()
    (host.dir / "authorized_keys").write_text(f'command="{wrapper}" {pub}\n')
