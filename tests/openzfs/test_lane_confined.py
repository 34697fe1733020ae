"""Every job kind under the shipped units' confinement (issue 49), on Debian 13's systemd: each
command runs in a transient service (`systemd-run`) with the [Service] settings of systemd/rebal.service
word for word (capability bounding set, device ACL, system call filter, ProtectProc, PrivateMounts,
MemoryDenyWriteExecute ...), plus the ReadWritePaths that `rebal units` would add. Fill, health, scrub,
rebalance by copy and by `zfs rewrite`, refresh, replication (push, pull, local, rsync), verify,
restore, metrics and notify (SMTP and webhook on loopback) each do their work; a leftover copy that
another user's process holds open is left alone (asked with a lease, not read from /proc); and the
units' exposure by `systemd-analyze security` is 3.0 or less."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from lanelib import write_random
from zfsenv import create_pool, sh

pytestmark = [pytest.mark.openzfs]

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "rebal.service"
NOT_CONFINEMENT = ("Type", "ExecStart", "ExecReload", "KillSignal", "TimeoutStopSec", "Restart", "RestartSec")
# CapBnd of /proc/self/status: the bits of the capabilities the unit keeps
CAPS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4,
        "CAP_SYS_ADMIN": 21, "CAP_LEASE": 28, "CAP_SETFCAP": 31}


def unit_settings(unit: Path) -> list[tuple[str, str]]:
    """The [Service] settings of a unit file that confine it (not how it starts or stops)."""
    out, section = [], ""
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            k, v = line.split("=", 1)
            if k not in NOT_CONFINEMENT:
                out.append((k, v))
    return out


class Confined:
    """A oneshot unit with the shipped unit's [Service] settings (plus the ReadWritePaths `rebal
    units` would add) whose ExecStart runs one command line at a time: `systemctl start` waits for
    it, `systemctl show` gives its exit status, its output goes to files."""

    def __init__(self, base: Path, rw: list[str]) -> None:
        self.base = base
        self.name = f"rebal-confined-{os.getpid()}.service"
        self.unit = Path("/run/systemd/system") / self.name
        lines = ["[Service]", "Type=oneshot", f"ExecStart=/bin/sh {base / 'cmd.sh'}",
                 f"StandardOutput=truncate:{base / 'out.txt'}", f"StandardError=truncate:{base / 'err.txt'}"]
        lines += [f"{k}={v}" for k, v in unit_settings(UNIT)] + [f"ReadWritePaths={p}" for p in rw]
        self.unit.write_text("\n".join(lines) + "\n")
        sh("systemctl", "daemon-reload")

    def __call__(self, argv: list[str], ok=(0,), refusals=False) -> subprocess.CompletedProcess:
        """``argv`` under the confinement; no traceback, and no "Operation not permitted" (a refusal
        by the confinement) unless ``refusals``."""
        (self.base / "cmd.sh").write_text("exec " + " ".join(shlex.quote(a) for a in argv) + "\n")
        subprocess.run(["systemctl", "start", self.name], capture_output=True, timeout=900)
        code = int(sh("systemctl", "show", "-p", "ExecMainStatus", "--value", self.name).stdout.strip() or -1)
        subprocess.run(["systemctl", "reset-failed", self.name], capture_output=True)
        r = subprocess.CompletedProcess(argv, code, (self.base / "out.txt").read_text(),
                                        (self.base / "err.txt").read_text())
        assert r.returncode in ok, f"{argv}: exit {r.returncode}\n{r.stderr[-3000:]}\n{r.stdout[-2000:]}"
        for out in (r.stdout, r.stderr):
            assert "Traceback" not in out, f"{argv}:\n{out[-3000:]}"
            assert refusals or "Operation not permitted" not in out, f"{argv}:\n{out[-3000:]}"
        return r

    def close(self) -> None:
        self.unit.unlink(missing_ok=True)
        sh("systemctl", "daemon-reload", check=False)
        subprocess.run(["systemctl", "reset-failed", self.name], capture_output=True)


@pytest.fixture
def site(backup_host, zfs_ready):
    """A file server's pool grown by a vdev, a backup pool, and the admin's files, all under /srv (the
    unit's PrivateTmp hides the test's own /var/tmp)."""
    base = Path(f"/srv/rbconf{os.getpid()}")
    base.mkdir(parents=True)
    pools = []
    try:
        src = create_pool(base, [[]], size="512M")
        pools.append(src)
        dst = create_pool(base, [[]], size="1G")
        pools.append(dst)
        etc = base / "etc"
        etc.mkdir()
        shutil.copy(backup_host.identity, etc / "id")
        shutil.copy(backup_host.known_hosts, etc / "known_hosts")
        (etc / "id").chmod(0o600)
        (base / "state").mkdir()
        yield base, src, dst, etc
    finally:
        for p in pools:
            p.destroy()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_every_job_kind_works_confined(site, backup_host):
    base, src, dst, etc = site
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "create", "-o", "compression=off", f"{src.name}/docs")
    data = src.mountpoint / "data"
    for i in range(6):
        write_random(data / f"f{i}.bin", 8, seed=i)
    (data / "sub").mkdir()
    for i in range(6):
        write_random(data / "sub" / f"g{i}.bin", 8, seed=10 + i)
    for i in range(8):  # compressible: refresh has work once compression is on
        (src.mountpoint / "docs" / f"t{i}.txt").write_bytes(b"rebal confined " * 70000)
    sh("zpool", "sync", src.name)
    src.add(str(src.disk("512M")))
    sh("zfs", "set", "compression=zstd", f"{src.name}/docs")
    sh("zfs", "create", f"{dst.name}/b")
    rsync_dir = dst.mountpoint / "rs"
    rsync_dir.mkdir()

    # a leftover copy (no journal names it) that a process of another user holds open
    victim = data / "f0.bin"
    left = data / f".rebal-{os.lstat(victim).st_ino:x}.tmp"
    shutil.copy(victim, left)
    left.chmod(0o644)
    holder = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
                               f'exec 3<"{left}"; read line'], stdin=subprocess.PIPE)

    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message
    from sshenv import free_port

    got_mail: list = []

    class Keep(Message):
        def handle_message(self, message):
            got_mail.append(message)

    mail = Controller(Keep(), hostname="127.0.0.1", port=free_port())
    mail.start()
    import http.server
    import threading

    posts: list = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=web.serve_forever, daemon=True).start()

    def job(name: str, **kw) -> str:
        block = backup_host.config_block(name=name, **kw)
        return block.replace(str(backup_host.identity), str(etc / "id")).replace(
            str(backup_host.known_hosts), str(etc / "known_hosts"))

    cfg = base / "config.toml"
    cfg.write_text(
        f'state_db = "{base / "state" / "state.db"}"\npools = ["{src.name}", "{dst.name}"]\n'
        f'metrics_file = "{base / "state" / "rebal.prom"}"\n'
        f'[rebalance]\ntargets = ["{src.name}/data"]\ntarget_spread = 2\n'
        f'[notify]\n[notify.email]\nhost = "127.0.0.1"\nport = {mail.port}\nstarttls = false\n'
        f'from = "rebal@test"\nto = ["admin@test"]\n'
        f'[notify.webhook]\nurl = "http://127.0.0.1:{web.server_address[1]}/hook"\n'
        + job("push", source=f"{src.name}/data", target=f"{dst.name}/b/push")
        + f'[[replicate]]\nname = "pull"\ndirection = "pull"\nsource_host = "{backup_host.host}"\n'
          f'source_port = {backup_host.port}\nidentity_file = "{etc / "id"}"\nknown_hosts = "{etc / "known_hosts"}"\n'
          f'source = "{src.name}/data"\ntarget = "{dst.name}/b/pull"\n'
        + f'[[replicate]]\nname = "local"\nsource = "{src.name}/data"\ntarget = "{dst.name}/b/local"\n'
        + job("rs", mode="rsync", source=f"{src.name}/data", target=str(rsync_dir)))
    rebal = [shutil.which("rebal") or "/usr/local/bin/rebal", "--config", str(cfg)]
    out = base / "restored"
    out.mkdir()
    confined = Confined(base, [str(base / "state"), str(src.mountpoint), str(out)])
    try:
        # the confinement is real: the bounding set is the unit's, no disk can be written
        status = confined(["cat", "/proc/self/status"]).stdout
        capbnd = int(re.search(r"^CapBnd:\s*([0-9a-f]+)", status, re.M).group(1), 16)
        assert capbnd == sum(1 << b for b in CAPS.values()), hex(capbnd)
        # DeviceAllow: a disk opens for reading, not for writing (count=0: nothing would be written)
        dev = confined(["sh", "-c", "dd if=/dev/vdb of=/dev/null count=1 2>&1; echo rc=$?; "
                        "dd if=/dev/zero of=/dev/vdb count=0 2>&1; echo rc=$?"], refusals=True).stdout
        assert dev.count("rc=0") == 1 and "Operation not permitted" in dev, dev

        st = json.loads(confined(rebal + ["status", src.name, "--json"]).stdout)
        assert st, st
        confined(rebal + ["health", "--json"], ok=(0, 1))
        confined(rebal + ["scrub", src.name])

        threshold = Path("/sys/module/zfs/parameters/zfs_mg_noalloc_threshold")
        admin = threshold.read_text()
        rb = json.loads(confined(rebal + ["rebalance", f"{src.name}/data", "--method", "copy", "--target-spread",
                                          "10", "--json"]).stdout.splitlines()[-1])  # steered
        assert rb["outcome"] == "ok" and rb["files"] > 0, rb
        assert rb["steered"] is not None and threshold.read_text() == admin, (rb, admin)
        assert left.exists(), "the leftover copy another process holds open was removed"
        holder.communicate(b"\n")
        rb2 = json.loads(confined(rebal + ["rebalance", f"{src.name}/data", "--method", "rewrite", "--all",
                                           "--json"]).stdout.splitlines()[-1])
        assert rb2["outcome"] == "ok" and rb2["files"] > 0, rb2
        assert not left.exists(), "the leftover copy nothing holds open was kept"
        rf = confined(rebal + ["refresh", str(src.mountpoint / "docs"), "--json"])
        assert json.loads(rf.stdout.splitlines()[-1])["outcome"] == "ok", rf.stdout[-2000:]

        for name in ("push", "pull", "local", "rs"):
            r = json.loads(confined(rebal + ["replicate", name, "--json"]).stdout)
            assert r["outcome"] == "ok", (name, r)
        assert (rsync_dir / "f3.bin").read_bytes() == (data / "f3.bin").read_bytes()
        confined(rebal + ["verify", "push"])
        confined(rebal + ["restore", "push", "--path", "f3.bin", "--to", str(out)])
        assert (out / "f3.bin").read_bytes() == (data / "f3.bin").read_bytes()
        assert f'rebal_pool_spread_points{{pool="{src.name}"}}' in confined(rebal + ["metrics"]).stdout
        confined(rebal + ["run", "metrics"])
        assert (base / "state" / "rebal.prom").exists()
        mails, hooks = len(got_mail), len(posts)  # (a health warning may have been sent already)
        n = json.loads(confined(rebal + ["notify", "--test", "--json"]).stdout)
        assert n["ok"] and n["channels"] == {"email": "ok", "webhook": "ok"}, n
        assert (len(got_mail), len(posts)) == (mails + 1, hooks + 1)
    finally:
        confined.close()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        mail.stop()
        web.shutdown()


@pytest.mark.parametrize("unit", ["rebal.service", "rebal-due.service"])
def test_the_units_expose_at_most_3_on_debian_13(unit):
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(REPO / "systemd" / unit)],
                       capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    assert m, (r.stdout[-2000:], r.stderr)
    figures = os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl")
    with open(figures, "a") as f:
        f.write(json.dumps({"test": "unit-exposure", "unit": unit, "exposure": float(m.group(1))}) + "\n")
    assert float(m.group(1)) <= 3.0, r.stdout
