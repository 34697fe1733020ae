"""The shipped systemd units under the guest's real systemd (issue 20): installed as the README says,
a scheduled rebalance in timer mode without the drop-in is refused (read-only sandbox): a failed unit,
a failed run, an alert; with `rebal units` it moves the spread under the target and a scheduled
replication lands; in daemon mode the same, on a pool grown again. The journal lines are kept in
/var/tmp/lane-figures.jsonl for the record."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import rebal_json
from lanelib import restore_etc, write_random
from zfsenv import sh

pytestmark = [pytest.mark.openzfs, pytest.mark.lane_long, pytest.mark.lane_alone]

REPO = Path(__file__).resolve().parents[2]
ETC = Path("/etc/rebal")
UNITS = ("rebal.service", "rebal-due.service", "rebal-due.timer")
STATE = "/var/lib/rebal/lane-systemd.db"
ALERTS = "/var/lib/rebal/lane-alerts"
DISKS = ("/dev/vdd", "/dev/vde", "/dev/vdf", "/dev/vdg", "/dev/vdh")


def systemctl(*args, check=True):
    return sh("systemctl", *args, check=check)


def journal(unit: str, since: str) -> list[str]:
    out = sh("journalctl", "-u", unit, "--since", since, "-o", "cat", "--no-pager").stdout
    return [line for line in out.splitlines() if "rebal" in line]


def record(what: str, lines: list[str]) -> None:
    with open("/var/tmp/lane-figures.jsonl", "a") as f:
        f.write(json.dumps({"test": "systemd", "what": what, "journal": lines[-12:]}) + "\n")


@pytest.fixture
def server(backup_host, zfs_ready, request):
    """A grown pool mounted under /srv (PrivateTmp hides /tmp and /var/tmp from the units), a backup
    pool, /etc/rebal/config.toml with schedules every few seconds, the units installed."""
    if not Path("/run/systemd/system").is_dir():
        pytest.fail("the guest does not run systemd as PID 1")
    assert Path("/usr/local/bin/rebal").exists(), "the units run /usr/local/bin/rebal (README: Install)"
    pid = os.getpid()
    src, dst = f"lanesd{pid}", f"lanesb{pid}"
    saved = (ETC / "config.toml").read_bytes() if (ETC / "config.toml").exists() else None

    def cleanup():
        systemctl("stop", "rebal.service", "rebal-due.service", check=False)
        for u in UNITS:
            Path(f"/etc/systemd/system/{u}").unlink(missing_ok=True)
            shutil.rmtree(f"/etc/systemd/system/{u}.d", ignore_errors=True)
        systemctl("daemon-reload")
        systemctl("reset-failed", check=False)
        restore_etc(ETC, saved, STATE, ALERTS)
        for p in (src, dst):
            sh("zpool", "destroy", "-f", p, check=False)
        for d in DISKS:
            sh("zpool", "labelclear", "-f", d, check=False)

    request.addfinalizer(cleanup)  # runs even when the setup below fails half way
    sh("zpool", "create", "-f", "-m", f"/srv/{src}", src, DISKS[0], DISKS[1])
    sh("zpool", "create", "-f", "-m", f"/srv/{dst}", dst, DISKS[4])
    sh("zfs", "create", f"{src}/data")
    for i in range(10):
        write_random(f"/srv/{src}/data/f{i}.bin", 48, seed=i)
    sh("zpool", "sync", src)
    sh("zpool", "add", "-f", src, DISKS[2])
    ETC.mkdir(exist_ok=True)
    # the units see neither /tmp nor /var/tmp: the job's key and host key go under /etc/rebal
    shutil.copy(backup_host.identity, ETC / "lane-id")
    shutil.copy(backup_host.known_hosts, ETC / "lane-known_hosts")
    (ETC / "lane-id").chmod(0o600)
    job = backup_host.config_block(name="nightly", source=f"{src}/data", target=f"{dst}/copy",
                                   schedule="*/5 * * * * *")
    job = job.replace(str(backup_host.identity), str(ETC / "lane-id")).replace(
        str(backup_host.known_hosts), str(ETC / "lane-known_hosts"))
    (ETC / "config.toml").write_text(
        f'state_db = "{STATE}"\n'
        f'[rebalance]\ntargets = ["{src}/data"]\ntarget_spread = 6\n'
        '[schedule]\nfill = "*/5 * * * * *"\nhealth = "0 0 1 1 *"\nrebalance = "*/5 * * * * *"\n'
        f'[notify]\ncommand = ["/bin/sh", "-c", "cat >> {ALERTS}"]\n' + job)
    for u in UNITS:
        shutil.copy(REPO / "systemd" / u, f"/etc/systemd/system/{u}")
    systemctl("daemon-reload")
    return src, dst


def runs(kind: str) -> list[dict]:
    return rebal_json("runs", "--kind", kind, "--limit", "5", config=ETC / "config.toml")["runs"]


def spread(pool: str) -> float:
    return rebal_json("status", pool, config=ETC / "config.toml")["pools"][0]["spread"]


def test_units_timer_and_daemon_mode(server):
    src, dst = server
    cfg = ETC / "config.toml"
    assert spread(src) > 6
    # timer mode, as shipped: the sandbox leaves the pool read-only
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    r = systemctl("start", "rebal-due.service", check=False)
    assert r.returncode != 0, "a rebalance that could not write must fail the unit"
    assert systemctl("is-failed", "rebal-due.service", check=False).stdout.strip() == "failed"
    [refused] = runs("rebalance")[:1]
    assert refused["outcome"] == "failed" and "read-only to rebal" in refused["error"], refused
    assert "rebal units" in refused["error"]
    assert "job:rebalance" in Path(ALERTS).read_text(), "an alert went out"
    lines = journal("rebal-due.service", since)
    assert any("ERROR rebal.job.rebalance" in x for x in lines), lines
    record("timer mode, no drop-in: refused", lines)

    # `rebal units` writes the drop-ins; the next due run rebalances and replicates
    out = sh("/usr/local/bin/rebal", "--config", str(cfg), "units", "--json").stdout
    written = json.loads(out)["changed"]
    assert sorted(written) == sorted(f"/etc/systemd/system/{u}.d/50-rebal-paths.conf"
                                     for u in ("rebal.service", "rebal-due.service"))
    assert f"/srv/{src}/data" in Path(written[0]).read_text()
    systemctl("daemon-reload")
    systemctl("reset-failed", "rebal-due.service")
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    r = systemctl("start", "rebal-due.service", check=False)
    lines = journal("rebal-due.service", since)
    assert r.returncode == 0, lines
    record("timer mode, with the drop-in: ok", lines)
    done = runs("rebalance")
    assert done[0]["outcome"] == "ok" and done[0]["id"] != refused["id"], done[:2]
    assert done[1]["outcome"] == "failed", "the refused run stays in the record as failed"
    assert spread(src) <= 6
    reps = runs("replicate")
    assert reps[0]["outcome"] == "ok", reps[0]  # the scheduled replication landed (in full in either run)
    assert any(x["outcome"] == "ok" and x["details"]["bytes"] > 400 << 20 for x in reps), reps

    # daemon mode: the pool grows again; the daemon's scheduled rebalance and replication run
    sh("zpool", "add", "-f", src, DISKS[3])
    for i in range(10, 14):
        write_random(f"/srv/{src}/data/f{i}.bin", 48, seed=i)
    sh("zpool", "sync", src)
    before = {k: (runs(k) or [{"id": 0}])[0]["id"] for k in ("rebalance", "replicate")}
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    systemctl("start", "rebal.service")
    deadline = time.monotonic() + 300
    while True:
        rb = [x for x in runs("rebalance") if x["id"] > before["rebalance"] and x["outcome"] == "ok"]
        rp = [x for x in runs("replicate") if x["id"] > before["replicate"] and x["outcome"] == "ok"]
        if rb and rp and spread(src) <= 6:
            break
        assert time.monotonic() < deadline, (runs("rebalance")[:2], runs("replicate")[:2], spread(src))
        time.sleep(2)  # the daemon runs on its own clock: poll its records, bounded
    systemctl("stop", "rebal.service")
    lines = journal("rebal.service", since)
    record("daemon mode", lines)
    assert systemctl("is-failed", "rebal.service", check=False).stdout.strip() != "failed", lines
