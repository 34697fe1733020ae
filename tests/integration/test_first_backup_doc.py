"""docs/first-backup.md followed word for word: its code blocks are read from the file and run in
order, against a real sshd on loopback playing the backup host `bk` and a real gate, with only the
names a test machine cannot have put in their place (the pools, /etc/rebal, the sshd's files, its
port, as the guide's own "another port" notes say). It ends as the guide promises: `rebal verify`
exit 0 and `rebal health` OK. A change to the guide runs here as it is written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from sshenv import start_sshd
from zfsenv import sh

# lane_long: CI's suite follows the guide on zfs-fuse; the full lane on OpenZFS (4 minutes under TCG)
pytestmark = [pytest.mark.zfs, pytest.mark.lane, pytest.mark.lane_long]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "first-backup.md"


@dataclass
class Block:
    step: int
    lang: str
    text: str


def blocks() -> list[Block]:
    """The guide's fenced blocks with the number of the step they belong to."""
    out, step, lang, body = [], 0, None, []
    for line in GUIDE.read_text().splitlines():
        m = re.match(r"^(\d+)\. \*\*", line)
        if m and lang is None:
            step = int(m.group(1))
        fence = re.match(r"^\s*```(\w*)\s*$", line)
        if fence and lang is None:
            lang, body = fence.group(1), []
        elif fence:
            out.append(Block(step, lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line.strip())
    return out


def commands(block: Block) -> list[str]:
    """Each command line of a shell block, its trailing comment kept (bash drops it)."""
    return [line for line in block.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


class Reader:
    """Runs the guide's lines as the admin would, with this machine's names put in."""

    def __init__(self, tmp_path: Path, src: str, dst: str, host) -> None:
        self.tmp, self.host = tmp_path, host
        self.etc = tmp_path / "etc-rebal"
        self.etc.mkdir()
        rebal_bin = Path(sys.executable).parent / "rebal"  # the checkout's venv, else the one on PATH (the lane)
        rebal_bin = rebal_bin if rebal_bin.exists() else Path(shutil.which("rebal") or "rebal")
        assert rebal_bin.is_absolute() and rebal_bin.exists(), rebal_bin
        self.names = [  # longest first, so no name is cut by a shorter one
            ("/etc/ssh/ssh_host_ed25519_key.pub", str(host.dir / "hostkey.pub")),
            ("/root/.ssh/authorized_keys", str(host.dir / "authorized_keys")),
            ("/usr/bin/rebal", str(rebal_bin)),
            ("/tmp/bk.key", str(tmp_path / "bk.key")),
            ("/etc/rebal/", f"{self.etc}/"),
            ("tank/data", f"{src}/data"),
            ("backup/fs", f"{dst}/fs"),
        ]
        self.env = dict(os.environ, REBAL_CONFIG=str(self.etc / "config.toml"),
                        PATH=f"{rebal_bin.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")

    def put_in(self, text: str) -> str:
        for theirs, ours in self.names:
            text = text.replace(theirs, ours)
        text = re.sub(r'\bbk\b(?!\.)', self.host.host, text)
        # the guide's "another port": `ssh -p 2222 -i ...`, `ssh-keyscan -p 2222 ...`
        return re.sub(r"\b(ssh|ssh-keyscan) ", rf"\1 -p {self.host.port} ", text)

    def run(self, line: str) -> subprocess.CompletedProcess:
        """One command line of the guide, by bash, as it is typed."""
        r = subprocess.run(["bash", "-o", "pipefail", "-c", self.put_in(line)], capture_output=True, text=True,
                           env=self.env, stdin=subprocess.DEVNULL, timeout=600)
        assert "Traceback" not in r.stderr, r.stderr
        return r

    def ok(self, line: str) -> str:
        r = self.run(line)
        assert r.returncode == 0, (line, r.returncode, r.stdout, r.stderr)
        return r.stdout


def test_the_first_backup_guide_as_written_ends_verified_and_healthy(make_pool, zfs_ready, tmp_path):
    src, dst = make_pool([[]], size="128M"), make_pool([[]], size="128M")
    sh("zfs", "create", f"{src.name}/data")  # the file server's data the guide backs up
    sh("zfs", "create", f"{src.name}/data/docs")  # `recursive = true`: a child too
    for d, n in ((src.mountpoint / "data", 40), (src.mountpoint / "data" / "docs", 20)):
        for i in range(n):
            Path(d, f"f{i}").write_bytes(os.urandom(4096 + 997 * i))
    host = start_sshd(tmp_path / "sshd")
    me = Reader(tmp_path, src.name, dst.name, host)
    steps = blocks()
    by_step: dict[int, list[Block]] = {}
    for b in steps:
        by_step.setdefault(b.step, []).append(b)
    assert sorted(by_step) == [1, 2, 3, 4, 5, 6, 7, 8], [(b.step, b.lang) for b in steps]
    try:
        # 1. the backup host's empty dataset (on bk: here, the second pool)
        for line in commands(by_step[1][0]):
            me.ok(line)
        props = sh("zfs", "get", "-H", "-o", "value", "setuid,devices", f"{dst.name}/fs").stdout.split()
        assert props == ["off", "off"], props
        # 2. the job's key
        for line in commands(by_step[2][0]):
            me.ok(line)
        assert os.stat(me.etc / "id_ed25519").st_mode & 0o077 == 0
        # 3. the host key, compared with what the host itself reports, then pinned
        scan, on_bk, pin = commands(by_step[3][0])
        seen, real = me.ok(scan).split()[1], me.ok(on_bk).split()[1]
        assert seen == real and seen.startswith("SHA256:"), (seen, real)
        me.ok(pin)
        assert os.stat(me.etc / "known_hosts").st_mode & 0o777 == 0o600
        keys = [ln for ln in (me.etc / "known_hosts").read_text().splitlines() if not ln.startswith("#")]
        assert keys and all(ln.startswith(f"[{host.host}]:{host.port} ") for ln in keys), keys  # (OpenSSH 10: a # line too)
        # 4. the gated line, printed and appended to the backup host's authorized_keys; then its two tests
        (echo,), tests = commands(by_step[4][0]), commands(by_step[4][1])
        line = me.ok(echo).strip()
        assert line.startswith('command="') and ',restrict ssh-ed25519 ' in line, line
        with open(host.dir / "authorized_keys", "a") as f:
            f.write(line + "\n")
        assert '"rebal_gate": 1' in me.ok(tests[0])
        refused = me.run(tests[1])
        assert refused.returncode != 0 and "not allowed" in refused.stderr, refused.stderr
        assert sh("zfs", "list", "-H", f"{dst.name}/fs").returncode == 0
        # 5. the job, as written, and the check of the config; a test's state database of its own
        (toml,) = by_step[5]
        assert toml.lang == "toml"
        # (and the pools this test made: the suite runs three tests at once, and another's pool,
        # imbalanced on purpose, would be in a health check of every pool of the machine)
        (me.etc / "config.toml").write_text(f'state_db = "{tmp_path / "state.db"}"\n'
                                            f'pools = ["{src.name}", "{dst.name}"]\n'
                                            + me.put_in(toml.text).replace(
                                                'target_host = "127.0.0.1"',
                                                f'target_host = "127.0.0.1"\ntarget_port = {host.port}'))
        assert "Then `rebal config check`" in GUIDE.read_text()  # said in the step's prose, not a block
        assert "OK (1 replication job(s)" in me.ok("rebal config check")
        # 6. the dry run through the gate changes nothing
        (dry,) = commands(by_step[6][0])
        assert "nightly" in me.ok(dry)
        assert sh("zfs", "list", "-H", f"{dst.name}/fs/data", check=False).returncode != 0, "a dry run made it"
        # 7. the first run, the restore point it made, and a verify through the gate: exit 0
        first, backups, verify = commands(by_step[7][0])
        me.ok(first)
        assert "@rebal-nightly-" in me.ok(backups)
        me.ok(verify)
        for ds in ("data", "data/docs"):
            assert sh("zfs", "list", "-H", f"{dst.name}/fs/{ds}").returncode == 0, ds
        # 8. the schedule: `rebal units` writes its drop-ins here into a directory of the test's own
        # (systemctl and /etc/systemd/system belong to the machine that runs the tests, not to a test)
        (sched,) = commands(by_step[8][0])
        assert sched.startswith("rebal units && systemctl daemon-reload"), sched
        me.ok(f"rebal units --dir {tmp_path / 'units'}")
        # 9. every morning: health OK (exit 0) and the run listed
        text = " ".join(GUIDE.read_text().split())
        assert "`rebal health` (exit 0 OK" in text and "`rebal runs --job nightly`" in text
        health = me.run("rebal health")
        assert health.returncode == 0, (health.stdout, health.stderr)
        assert "never verified" not in health.stdout + health.stderr
        assert "replicate" in me.ok("rebal runs --job nightly")
    finally:
        host.stop()
