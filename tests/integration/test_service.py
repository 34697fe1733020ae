"""Service pieces against real parts: zfs-fuse pools, an SMTP server (aiosmtpd) and an HTTP server
on loopback, systemd-analyze, prometheus_client's parser, and the daemon as a process."""

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest, temp_leftovers
from treegen import mixed_tree
from zfsenv import sh

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def mailbox():
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    got = []

    class Keep(Message):
        def handle_message(self, message):
            got.append(message)

    from sshenv import free_port

    c = Controller(Keep(), hostname="127.0.0.1", port=free_port())
    c.start()
    c.got = got
    yield c
    c.stop()


@pytest.fixture
def webhook():
    posts = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    srv.posts = posts
    yield srv
    srv.shutdown()


def notify_cfg(tmp_path, mailbox, webhook, pool, extra=""):
    p = tmp_path / "config.toml"
    p.write_text(f'''state_db = "{tmp_path / 'state.db'}"
pools = ["{pool}"]
{extra}
[notify]
reminder_hours = 24
[notify.email]
host = "127.0.0.1"
port = {mailbox.port}
starttls = false
from = "rebal@test"
to = ["admin@test"]
[notify.webhook]
url = "http://127.0.0.1:{webhook.server_address[1]}/hook"
''')
    return p


def settle_resilver(pool):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a condition of the pool, bounded
        out = sh("zpool", "status", pool).stdout
        if "resilver in progress" not in out and "in progress" not in out:
            return
        time.sleep(0.2)
    raise AssertionError("resilver did not finish")


@pytest.mark.zfs
def test_offline_mirror_side_is_critical_notified_then_recovered_once(make_pool, tmp_path, mailbox, webhook):
    pool = make_pool([["mirror", 2]], size="128M")
    sh("zpool", "scrub", pool.name)
    settle_resilver(pool.name)
    cfg = notify_cfg(tmp_path, mailbox, webhook, pool.name)
    assert rebal("health", config=cfg).returncode == 0
    assert mailbox.got == [] and webhook.posts == []
    victim = str(pool.disks[1])
    sh("zpool", "offline", pool.name, victim)
    r = rebal("health", config=cfg, check=False)
    assert r.returncode == 2
    assert f"CRITICAL {pool.name}: device {victim} (mirror-0) is OFFLINE" in r.stdout
    assert len(mailbox.got) == 1 and "CRITICAL" in mailbox.got[0]["Subject"]
    assert victim in mailbox.got[0].get_payload(decode=True).decode()
    assert len(webhook.posts) == 1 and webhook.posts[0]["level"] == "CRITICAL"
    assert any(victim in f["message"] for f in webhook.posts[0]["data"]["findings"])
    rebal("health", config=cfg, check=False)  # the same state again: no second message
    assert len(mailbox.got) == 1 and len(webhook.posts) == 1
    sh("zpool", "online", pool.name, victim)
    settle_resilver(pool.name)
    assert rebal("health", config=cfg).returncode == 0
    assert len(mailbox.got) == 2 and "RECOVERED" in mailbox.got[1]["Subject"]
    assert webhook.posts[1]["level"] == "RECOVERED"
    rebal("health", config=cfg)
    assert len(mailbox.got) == 2 and len(webhook.posts) == 2, "the recovery is sent once"


def test_notify_test_message(tmp_path, mailbox, webhook):
    cfg = notify_cfg(tmp_path, mailbox, webhook, "tank")
    out = rebal("notify", "--test", config=cfg).stdout
    assert "email: ok" in out and "webhook: ok" in out
    assert "test message" in mailbox.got[0]["Subject"] and webhook.posts[0]["level"] == "TEST"


def test_notify_test_reports_a_dead_channel(tmp_path, mailbox, webhook):
    cfg = notify_cfg(tmp_path, mailbox, webhook, "tank")
    cfg.write_text(cfg.read_text().replace(f"port = {mailbox.port}", "port = 1"))
    r = rebal("notify", "--test", config=cfg, check=False)
    assert r.returncode == 1 and "email: ConnectionRefusedError" in r.stdout and "webhook: ok" in r.stdout


@pytest.mark.zfs
def test_metrics_parse_and_are_written_atomically(make_pool, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    pool = make_pool([[], ["mirror", 2]], size="128M")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_db = "{tmp_path / "s.db"}"\npools = ["{pool.name}"]\n')
    out = tmp_path / "textfile" / "rebal.prom"
    out.parent.mkdir()
    rebal("metrics", "--output", str(out), config=cfg)
    fams = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    vdevs = {s.labels["vdev"] for s in fams["rebal_vdev_capacity_percent"].samples}
    assert vdevs == {str(pool.disks[0]), "mirror-1"}
    assert [s.value for s in fams["rebal_pool_health"].samples] == [0]
    assert fams["rebal_pool_spread_points"].samples[0].labels == {"pool": pool.name}
    assert list(out.parent.iterdir()) == [out], "no temp file left beside it"
    # the limits the alert rules compare against, and the scheduled job that writes the same file
    assert fams["rebal_pool_target_spread_points"].samples[0].value == 10
    assert abs(fams["rebal_pool_created_timestamp_seconds"].samples[0].value - time.time()) < 600
    sched = tmp_path / "sched.toml"
    sched.write_text(cfg.read_text() + f'metrics_file = "{tmp_path / "textfile" / "sched.prom"}"\n'
                     '[schedule]\nmetrics = "*/5 * * * *"\n')
    rebal("run", "metrics", config=sched)
    fams = {f.name: f for f in text_string_to_metric_families((tmp_path / "textfile" / "sched.prom").read_text())}
    assert abs(fams["rebal_metrics_timestamp_seconds"].samples[0].value - time.time()) < 600


def test_systemd_units_verify():
    units = sorted(str(p) for p in (ROOT / "systemd").iterdir())
    assert len(units) == 5
    r = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "rebal" not in r.stderr, r.stderr  # no warning about our units
    text = (ROOT / "systemd" / "rebal-due.timer").read_text()
    assert "Persistent=true" in text and "RandomizedDelaySec=" in text
    for u in ("rebal.service", "rebal-due.service", "rebal-watch.service"):
        t = (ROOT / "systemd" / u).read_text()
        for opt in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/rebal", "PrivateTmp=yes"):
            assert opt in t, (u, opt)


def grown_pool_with_data(make_pool, **tree):
    """A pool of two 256M vdevs with a tree in its dataset `data`, grown by a third: (pool, the
    data's directory, its manifest)."""
    pool = make_pool([[], []], size="256M")
    sh("zfs", "create", f"{pool.name}/data")
    data = Path(sh("zfs", "get", "-H", "-o", "value", "mountpoint", f"{pool.name}/data").stdout.strip())
    mixed_tree(data, xattrs=False, **tree)
    pool.add(str(pool.disk("256M")))
    return pool, data, manifest(data)


@pytest.mark.zfs
def test_daemon_runs_schedules_and_sigterm_leaves_the_rebalance_resumable(make_pool, tmp_path):
    pool, data, before = grown_pool_with_data(make_pool, small=200, large=8, large_mib=(8, 10), seed=21)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'''state_db = "{tmp_path / 's.db'}"
pools = ["{pool.name}"]
[rebalance]
targets = ["{pool.name}/data"]
target_spread = 0.01
max_rate = "15M"
[schedule]
fill = "*/1 * * * * *"
health = "*/2 * * * * *"
rebalance = "*/1 * * * * *"
''')
    env = dict(os.environ)
    env.pop("REBAL_CONFIG", None)
    d = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "daemon"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    import sqlite3

    def dirs_done() -> int:
        try:
            c = sqlite3.connect(tmp_path / "s.db")
            return c.execute("SELECT count(*) FROM rebalance_dirs WHERE state = 'done'").fetchone()[0]
        except sqlite3.Error:
            return 0

    deadline = time.monotonic() + 90
    seen = set()
    while time.monotonic() < deadline:  # until the schedules fired and the rebalance is under way
        seen = {r["kind"] for r in rebal_json("runs", "--limit", "50", config=cfg)["runs"]}
        if {"fill", "health", "rebalance"} <= seen and dirs_done() >= 1:
            break
        time.sleep(0.2)
    assert {"fill", "health", "rebalance"} <= seen, seen
    d.send_signal(signal.SIGTERM)
    out, err = d.communicate(timeout=120)
    assert d.returncode == 0, err
    assert "INFO rebal.scheduler: started with 3 scheduled jobs" in err
    assert "SIGTERM: stopping" in err
    runs = rebal_json("runs", "--kind", "rebalance", config=cfg)["runs"]
    assert runs[0]["outcome"] == "interrupted", runs[0]
    # the journal is consistent: nothing half-done, no temp file
    c = sqlite3.connect(tmp_path / "s.db")
    assert c.execute("SELECT count(*) FROM journal WHERE state = 'copying'").fetchone()[0] == 0
    assert temp_leftovers(data) == []
    assert manifest(data) == before
    # the next run continues the interrupted one
    r = rebal("run", "rebalance", config=cfg)
    assert r.returncode == 0
    last = rebal_json("runs", "--kind", "rebalance", config=cfg)["runs"][0]
    assert last["id"] == runs[0]["id"], "the interrupted run is continued, not started afresh"
    assert last["outcome"] in ("incomplete", "ok")
    assert manifest(data) == before and temp_leftovers(data) == []
    # listed once, and said to be in two parts, counting both (issue 36: only the second part's files)
    d = last["details"]
    assert d["parts"] == 2 and d["continued"].startswith("continued after the part before ended interrupted"), d
    assert d["files"] > d["this_part"]["files"] and d["bytes"] > d["this_part"]["bytes"], d
    assert "in 2 parts" in rebal("runs", "--kind", "rebalance", config=cfg).stdout


def test_run_due_uses_the_records(tmp_path):
    from datetime import datetime, timedelta, timezone

    from rebal import config, scheduler, state

    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(f'state_db = "{tmp_path / "s.db"}"\n[schedule]\nfill = "0 * * * *"\nhealth = "30 2 * * *"\n')
    cfg = config.load(str(cfg_path), check_cron=True)
    conn = state.connect(cfg.state_db)
    now = datetime(2026, 11, 22, 10, 5, tzinfo=timezone.utc)
    assert sorted(scheduler.due(cfg, conn, now)) == ["fill", "health"]  # never ran: both fired within a day
    rid = state.start_run(conn, "fill")
    conn.execute("UPDATE runs SET started = ? WHERE id = ?", ((now - timedelta(minutes=2)).timestamp(), rid))
    assert scheduler.due(cfg, conn, now) == ["health"]  # fill ran after its 10:00 firing
    assert sorted(scheduler.due(cfg, conn, now + timedelta(hours=1))) == ["fill", "health"]


@pytest.mark.zfs
def test_metrics_to_a_place_it_cannot_write_is_one_clear_line(tmp_path):
    """`rebal metrics --output` into a missing directory was an internal error, exit 70 (issue 36):
    now exit 1 (README: a command failed) with the path and what to do, before computing anything
    (it used to gather every pool's health and the state database first: 2-5 s)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_db = "{tmp_path / "s.db"}"\n')
    r = rebal("metrics", "--output", str(tmp_path / "no" / "such" / "x.prom"), config=cfg, check=False)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.strip() == (f"rebal: error: cannot write the metrics file {tmp_path / 'no' / 'such' / 'x.prom'}: "
                                "No such file or directory (its directory does not exist: create it, or name "
                                "another place in the config)")
    assert not (tmp_path / "s.db").exists()  # said before any metric was computed (the state never opened)


@pytest.mark.zfs
def test_a_reload_restarts_the_daemon_between_jobs_never_inside_one(make_pool, tmp_path):
    """`systemctl reload rebal` (SIGHUP; what the package's upgrade does): the running rebalance goes
    on to its end, then the daemon starts afresh in the same process (the new version, the config as
    it is now), and a SIGTERM still stops it cleanly (issue 36)."""
    import threading

    pool, data, before = grown_pool_with_data(make_pool, small=60, large=4, large_mib=(6, 8), seed=5)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_db = "{tmp_path / "s.db"}"\npools = ["{pool.name}"]\n'
                   f'[rebalance]\ntargets = ["{pool.name}/data"]\ntarget_spread = 0.01\nmax_rate = "8M"\n'
                   '[schedule]\nrebalance = "*/1 * * * * *"\n')
    d = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "daemon"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    started = threading.Semaphore(0)

    def read() -> None:
        for ln in d.stderr:
            lines.append(ln)
            if "started with" in ln:
                started.release()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        assert started.acquire(timeout=60), lines
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(r["outcome"] == "running" for r in
                                                      rebal_json("runs", "--kind", "rebalance", config=cfg)["runs"]):
            time.sleep(0.2)
        pid = d.pid
        d.send_signal(signal.SIGHUP)
        assert started.acquire(timeout=300), "the daemon did not start again: " + "".join(lines[-20:])
        assert d.poll() is None and d.pid == pid
        first = rebal_json("runs", "--kind", "rebalance", config=cfg)["runs"][-1]
        assert first["outcome"] in ("ok", "incomplete"), first  # run to its end, not cut
        text = "".join(lines)
        assert "SIGHUP: restarting once no job is running" in text and "restarting" in text
        assert text.index("SIGHUP") < text.rindex("started with")
        hup = next(i for i, ln in enumerate(lines) if "SIGHUP" in ln)
        ended = next(i for i, ln in enumerate(lines) if i > hup and "rebal.job.rebalance" in ln and "rewritten" in ln)
        again = next(i for i, ln in enumerate(lines) if i > hup and ln.rstrip().endswith("rebal.scheduler: restarting"))
        assert ended < again, lines[hup:again + 1]  # the rebalance running at the SIGHUP ended first
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=120)
    assert d.returncode == 0, "".join(lines[-20:])
    assert "Traceback" not in "".join(lines)
    assert manifest(data) == before


@pytest.mark.zfs
def test_the_unattended_commands_speak_json_and_run_has_a_dry_run(make_pool, tmp_path):
    """A script reads notify --test, run, scrub and metrics as JSON; `run --due --dry-run` says what
    the timer would run and runs nothing (issue 36)."""
    pool = make_pool([[]])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_db = "{tmp_path / "s.db"}"\npools = ["{pool.name}"]\n'
                   f'[schedule]\nfill = "* * * * *"\nhealth = "0 0 1 1 *"\n'
                   f'[notify]\ncommand = ["/bin/sh", "-c", "cat > {tmp_path / "sent"}"]\n')
    dry = rebal_json("run", "--due", "--dry-run", config=cfg)
    assert dry == {"due": ["fill"], "dry_run": True}, dry  # (health fires on 1 January only)
    assert rebal_json("runs", config=cfg)["runs"] == [], "a dry run runs nothing"
    ran = rebal_json("run", "fill", config=cfg)
    assert ran == {"jobs": [{"job": "fill", "outcome": "ok"}], "failed": 0}
    assert rebal_json("scrub", pool.name, config=cfg) == {"pool": pool.name, "host": None, "scrub": "started"}
    samples = rebal_json("metrics", config=cfg)["samples"]
    assert any(s["name"] == "rebal_pool_spread_points" and s["labels"] == {"pool": pool.name} for s in samples)
    assert rebal_json("notify", "--test", config=cfg) == {"channels": {"command": "ok"}, "ok": True}
    assert "test message" in (tmp_path / "sent").read_text()
    r = rebal("run", "nosuch", config=cfg, check=False)
    assert r.returncode == 2 and "no job named 'nosuch'" in r.stderr


EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")


@pytest.mark.parametrize("unit", ["rebal.service", "rebal-due.service", "rebal-watch.service"])
def test_the_units_expose_at_most_3(unit):
    """`systemd-analyze security` of the shipped units (issue 49: 6.2 before their confinement). The
    lane asks Debian 13's systemd the same (tests/openzfs/test_lane_confined.py)."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(ROOT / "systemd" / unit)],
                       capture_output=True, text=True)
    m = EXPOSURE.search(r.stdout)
    assert m, (r.returncode, r.stdout[-2000:], r.stderr)
    assert float(m.group(1)) <= 3.0, r.stdout


@pytest.mark.zfs
def test_health_goes_on_when_a_pool_goes_away_during_the_check(make_pool, cfg_file):
    """A pool exported or destroyed between the listing and `zpool status` (the lane saw it, with
    pools coming and going beside a health check) is left out: it made the whole check fail, with no
    JSON printed. Here the listing is the real one plus a pool that is gone by the time status runs."""
    from dataclasses import replace

    from rebal import config, jobs, state
    from rebal.zfs.host import ZfsHost

    pool = make_pool([[]], size="128M")

    class Listing(ZfsHost):
        def pools(self, names=()):
            real = super().pools(names)
            return real + [replace(real[0], name="gone" + pool.name)]

    cfg = config.load(str(cfg_file))
    findings, pools, _ = jobs.check_health(cfg, state.connect(cfg.state_db), Listing.here())
    assert {p.name for p in pools} >= {pool.name, "gone" + pool.name}
    assert not [f for f in findings if f.subject == "gone" + pool.name], findings


@pytest.mark.zfs
def test_health_says_a_watched_pool_that_is_not_imported_is_critical(make_pool, tmp_path):
    """A pool the config watches that is not imported (an import that failed at boot) is the check's
    most critical finding, in its report: `rebal health` exited 5 with an error and printed no JSON,
    which a monitoring script could not read."""
    pool = make_pool([[]], size="128M")
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\npools = ["{pool.name}", "rbtnotimported"]\n')
    r = rebal("health", "--json", config=cfg, check=False)
    assert r.returncode == 2, (r.returncode, r.stderr)
    h = json.loads(r.stdout)
    said = [f for f in h["findings"] if f["subject"] == "rbtnotimported"]
    assert said and said[0]["level"] == "CRITICAL" and "zpool import rbtnotimported" in said[0]["message"], h
    assert not [f for f in h["findings"] if f["subject"] == pool.name and f["level"] == "CRITICAL"], h
    text = rebal("health", config=cfg, check=False)
    assert text.returncode == 2 and "CRITICAL rbtnotimported: the pool is not imported" in text.stdout, text.stdout
