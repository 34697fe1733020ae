"""A day in the life of an admin, on the lane's Debian 13 with OpenZFS 2.4 and real systemd (issue 36):
nothing installed by pip. The README's install section for Debian 13 runs word for word (the .deb
installed with apt, the config written where the README says to edit it, `rebal units`, the
timer enabled); systemd runs the jobs (fill, health, the rebalance window with `zfs rewrite -P`, the
nightly replication with its bookmark cursor, a scrub, metrics); then by hand what an admin runs
next (runs, verify, runs again, backups, restore of one file, metrics, health); then the same day in
daemon mode; then `apt-get purge`. Every command's exit code is the README's, no command and no
journal line holds a traceback or exit 70, and the pool's tree equals its manifest at the end."""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from fsenv import manifest
from lanelib import write_random
from zfsenv import sh

pytestmark = [pytest.mark.openzfs, pytest.mark.lane_alone]  # installs the .deb, drops pip's rebal, systemd

REPO = Path(__file__).resolve().parents[2]
LANE = Path("/root/lane")
ETC = Path("/etc/rebal")
PROM_DIR = Path("/var/lib/prometheus/node-exporter")
DISKS = ("/dev/vdd", "/dev/vde", "/dev/vdf", "/dev/vdg")
EVERY_MINUTE = "* * * * *"


def readme_install_lines() -> list[str]:
    """The commands of the README's Debian 13 install block, as the admin reads them."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"\*\*Debian 13 \(trixie\)\*\*.*?```sh\n(.*?)```", text, re.S)
    assert block, "the README has a Debian 13 install block"
    return [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def admin(cmd: str, ok=(0,)) -> subprocess.CompletedProcess:
    """A command line as an admin types it (a login shell's PATH, no pip rebal anywhere)."""
    r = subprocess.run(["bash", "-c", cmd], cwd=LANE, capture_output=True, text=True, timeout=1800,
                       env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            "HOME": "/root", "LC_ALL": "C.UTF-8"})
    assert r.returncode in ok, f"{cmd}: exit {r.returncode}\n{r.stderr[-3000:]}\n{r.stdout[-2000:]}"
    for out in (r.stdout, r.stderr):
        assert "Traceback" not in out and "internal error" not in out, f"{cmd}:\n{out[-3000:]}"
    return r


def journal(unit: str, since: str) -> str:
    return sh("journalctl", "-u", unit, "--since", since, "-o", "cat", "--no-pager").stdout


def runs(kind: str, limit: int = 20) -> list[dict]:
    return json.loads(admin(f"rebal runs --kind {kind} --limit {limit} --json").stdout)["runs"]


@pytest.fixture
def day(backup_host, zfs_ready, request):
    """Two pools (the file server's, grown; the backup's), the admin's keys in /etc/rebal, and the
    pip install of the lane put aside for the day (put back after)."""
    debs = sorted(LANE.glob("rebal_*_all.deb"))
    assert debs, "the lane puts the .deb of this checkout in /root/lane (lane.py builds it)"
    if not Path("/run/systemd/system").is_dir():
        pytest.fail("the guest does not run systemd as PID 1")
    pid = os.getpid()
    src, dst = f"day{pid}", f"dayb{pid}"

    def cleanup():
        subprocess.run(["systemctl", "disable", "--now", "rebal.service", "rebal-due.timer"], capture_output=True)
        subprocess.run(["systemctl", "stop", "rebal-due.service"], capture_output=True)
        subprocess.run(["apt-get", "purge", "-y", "rebal"], capture_output=True)
        for u in ("rebal.service.d", "rebal-due.service.d"):
            shutil.rmtree(f"/etc/systemd/system/{u}", ignore_errors=True)
        subprocess.run(["systemctl", "daemon-reload"], capture_output=True)
        subprocess.run(["systemctl", "reset-failed"], capture_output=True)
        shutil.rmtree(ETC, ignore_errors=True)
        for p in (src, dst):
            sh("zpool", "destroy", "-f", p, check=False)
        for d in DISKS:
            sh("zpool", "labelclear", "-f", d, check=False)
        subprocess.run(["pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                        "--break-system-packages", "--force-reinstall", str(LANE / "pip-src")],
                       capture_output=True, timeout=600)

    request.addfinalizer(cleanup)
    sh("pip", "uninstall", "-y", "-q", "--break-system-packages", "rebal")
    assert shutil.which("rebal") is None, "nothing of pip's rebal is left"
    sh("zpool", "create", "-f", "-m", f"/srv/{src}", src, DISKS[0], DISKS[1])
    sh("zpool", "create", "-f", "-m", f"/srv/{dst}", dst, DISKS[3])
    sh("zfs", "create", f"{src}/data")
    for i in range(8):
        write_random(f"/srv/{src}/data/f{i}.bin", 24, seed=i)
    os.makedirs(f"/srv/{src}/data/docs", exist_ok=True)
    for i in range(40):
        Path(f"/srv/{src}/data/docs/n{i}.txt").write_text(f"note {i}\n" * (i + 1))
    sh("zpool", "sync", src)
    sh("zpool", "add", "-f", src, DISKS[2])
    return src, dst, debs[-1]


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_a_day_in_the_life(day, backup_host):
    src, dst, deb = day
    data = Path(f"/srv/{src}/data")
    before = manifest(data)
    lines = readme_install_lines()
    assert lines[0] == f"apt-get install -y ./{deb.name}", (lines[0], deb.name)

    # the README, word for word: install, (edit the config), check, units, the timer
    admin(lines[0])
    assert Path("/usr/bin/rebal").exists() and (ETC / "config.toml").exists()
    assert "[[replicate]]" not in [ln.strip() for ln in (ETC / "config.toml").read_text().splitlines()], \
        "the installed config runs no job"
    shutil.copy(backup_host.identity, ETC / "id_ed25519")
    shutil.copy(backup_host.known_hosts, ETC / "known_hosts")
    (ETC / "id_ed25519").chmod(0o600)
    PROM_DIR.mkdir(parents=True, exist_ok=True)
    job = backup_host.config_block(name="nightly", source=f"{src}/data", target=f"{dst}/copy", schedule=EVERY_MINUTE)
    job = job.replace(str(backup_host.identity), str(ETC / "id_ed25519")).replace(
        str(backup_host.known_hosts), str(ETC / "known_hosts"))
    (ETC / "config.toml").write_text(
        f'pools = ["{src}", "{dst}"]\n'
        f'[rebalance]\ntargets = ["{src}/data"]\ntarget_spread = 2\n'
        f'[schedule]\nfill = "{EVERY_MINUTE}"\nhealth = "{EVERY_MINUTE}"\nrebalance = "{EVERY_MINUTE}"\n'
        f'scrub = "{EVERY_MINUTE}"\nmetrics = "{EVERY_MINUTE}"\n' + job)
    for cmd in lines[1:]:
        admin(cmd)
    assert admin("systemctl is-enabled rebal-due.timer").stdout.strip() == "enabled"
    assert "/srv/" + src in Path("/etc/systemd/system/rebal-due.service.d/50-rebal-paths.conf").read_text()

    # what an admin reads: the man pages, completion of pool names
    assert "rebal rebalance" in admin("man -P cat rebal").stdout
    assert "target_spread" in admin("man -P cat 5 rebal.toml").stdout
    comp = admin(f"COMP_WORDS='rebal scrub {src[:3]}' COMP_CWORD=2 _REBAL_COMPLETE=complete_bash rebal").stdout
    assert src in comp.split(), comp

    # the timer fires by itself, once: a drop-in makes it fire 5 s after it starts instead of on its
    # calendar, as an admin would for a test (a repeating one could start a second round of jobs)
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    dropin = Path("/etc/systemd/system/rebal-due.timer.d")
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "50-test.conf").write_text("[Timer]\nOnCalendar=\nOnActiveSec=5s\nRandomizedDelaySec=0\n"
                                         "AccuracySec=1s\n")
    admin("systemctl daemon-reload && systemctl restart rebal-due.timer")
    deadline = time.monotonic() + 420  # six jobs, one a 200 MB rebalance: minutes on a slow TCG guest
    # done when the replication is recorded and the oneshot service is back to inactive: `is-active`
    # says "activating" (non-zero) while a oneshot runs, so it cannot tell running from done (seen:
    # the test read the replication still running on a loaded machine)
    while not (runs("replicate") and subprocess.run(["systemctl", "show", "-p", "ActiveState", "--value",
                                                     "rebal-due.service"], capture_output=True,
                                                    text=True).stdout.strip() in ("inactive", "failed")):
        assert time.monotonic() < deadline, ("the timer never fired", journal("rebal-due.service", since)[-2000:])
        time.sleep(2)  # systemd's clock fires the timer: poll what it leaves, bounded
    shutil.rmtree(dropin)
    admin("systemctl daemon-reload && systemctl start rebal-due.timer")
    log = journal("rebal-due.service", since)
    assert "Traceback" not in log and "internal error" not in log and "status=70" not in log, log[-3000:]
    for kind in ("fill", "health", "rebalance", "scrub", "metrics", "replicate"):
        got = runs(kind)
        assert got and got[0]["outcome"] == "ok", (kind, got[:1], log[-2000:])
    rb = runs("rebalance")[0]["details"]
    assert rb["spread_after"] <= 2 < rb["spread_before"], rb
    rp = runs("replicate")[0]["details"]
    assert {d["cursor"] for d in rp["datasets"]} == {"bookmark"}, rp
    prom = PROM_DIR / "rebal.prom"
    assert prom.exists()
    if shutil.which("promtool"):
        admin(f"promtool check metrics < {prom}")
    else:
        from prometheus_client.parser import text_string_to_metric_families

        assert any(f.name == "rebal_pool_spread_points" for f in text_string_to_metric_families(prom.read_text()))

    # by hand, one after another, as the README's exit codes say
    admin("rebal runs")
    admin("rebal verify nightly")  # 0: compared at a fresh shared snapshot
    table = admin("rebal runs").stdout  # (crashed after any verify: issue 36)
    assert re.search(r"\bverify\b.*\bok\b", table), table
    assert "rebal-nightly-" in admin("rebal backups nightly").stdout
    admin("rebal restore nightly --path f3.bin --to /root/day-restore")
    assert Path("/root/day-restore/f3.bin").read_bytes() == (data / "f3.bin").read_bytes()
    text = admin("rebal metrics").stdout
    assert f'rebal_pool_spread_points{{pool="{src}"}}' in text
    admin("rebal health")  # 0: every check passes, the backup verified
    admin("rebal scrub rbtnosuchpool", ok=(5,))  # the README's codes for mistakes too
    admin("rebal restore nightly --to " + f"{src}/data", ok=(2,))
    # the timer's rebalance and everything since: the tree is what it was before any job ran
    assert manifest(data) == before, "timer mode changed the file server's tree"

    # the same day in daemon mode: new data, the daemon's schedules replicate it
    admin("systemctl disable --now rebal-due.timer")
    write_random(str(data / "late.bin"), 8, seed=99)
    now = manifest(data)
    assert {k: v for k, v in now.items() if k != b"late.bin"} == before and b"late.bin" in now
    last = runs("replicate")[0]["id"]
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    admin("systemctl enable --now rebal.service")
    deadline = time.monotonic() + 240
    while not [r for r in runs("replicate") if r["id"] > last and r["outcome"] == "ok"]:
        assert time.monotonic() < deadline, (runs("replicate")[:2], journal("rebal.service", since)[-2000:])
        time.sleep(2)  # the daemon runs on its own clock (every minute): poll its records, bounded
    admin("systemctl stop rebal.service")
    log = journal("rebal.service", since)
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    admin("rebal health")
    assert manifest(data) == now, "daemon mode changed the file server's tree"
    # the new file is on the backup, byte for byte (the backup is received unmounted: mount it to read)
    from replscenarios import backup_root

    copy = Path(backup_root(f"{dst}/copy")) / "late.bin"
    assert copy.read_bytes() == (data / "late.bin").read_bytes(), "the daemon's run did not bring late.bin over"
    before = now

    # purge: the config and the state go, the admin's keys and the pools' data stay
    admin("systemctl disable rebal.service")
    admin("apt-get purge -y rebal")
    assert not (ETC / "config.toml").exists() and not Path("/var/lib/rebal").exists()
    assert (ETC / "id_ed25519").exists()
    assert manifest(data) == before
