"""One backup host, two file servers (issue 68), over a real sshd: each file server pushes its own
tree through its own gated key into its own root, and pings a dead-man monitor (a real HTTP server
on loopback). The backup host's `rebal watch`, with no config of theirs, reports both; the file
server whose replication stops (its backup failed over, its runs refused by the gate) is the one
flagged, its monitor got /fail with the reason, and the gate's refusals are said."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest
from conftest import rebal, rebal_json
from replscenarios import mountpoint
from zfsenv import sh

# the suite runs it on zfs-fuse; CI's quick lane leaves it to the full lane (CI's time, 2026-12-07)
pytestmark = [pytest.mark.zfs, pytest.mark.lane, pytest.mark.lane_long]


def push_config(tmp_path, name: str, host, key, source: str, target: str, url: str):
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f'state_db = "{tmp_path / (name + ".db")}"\n[[replicate]]\nname = "nightly"\n'
                   f'source = "{source}"\ntarget = "{target}"\ntarget_host = "{host.host}"\n'
                   f'target_port = {host.port}\nidentity_file = "{key}"\nknown_hosts = "{host.known_hosts}"\n'
                   f'recursive = true\nping_url = "{url}/{name}"\n')
    return cfg


def test_two_file_servers_into_one_backup_host_watched_there(make_pool, own_sshd, tmp_path, monitor):
    url, got = monitor
    bk = make_pool([[]], size="256M")
    servers = {n: make_pool([[]], size="128M") for n in ("fs1", "fs2")}
    log = tmp_path / "gate.log"
    lines = []
    for n, pool in servers.items():
        sh("zfs", "create", f"{bk.name}/{n}")  # each file server's root, as docs/first-backup.md makes it
        sh("zfs", "create", f"{pool.name}/data")
        sh("zfs", "create", f"{pool.name}/data/home")
        with open(os.path.join(mountpoint(f"{pool.name}/data/home"), "f"), "wb") as f:
            f.write(os.urandom(100_000))
        key = tmp_path / f"{n}.key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rebal@{n}", "-f", str(key)], check=True)
        gate = f"{shlex.quote(sys.executable)} -m rebal gate --receive-into {bk.name}/{n} --log {shlex.quote(str(log))}"
        lines.append(f'command="{gate}",restrict {(tmp_path / f"{n}.key.pub").read_text().strip()}\n')
    keys = own_sshd.dir / "authorized_keys"
    keys.write_text("".join(lines))
    cfgs = {n: push_config(tmp_path, n, own_sshd, tmp_path / f"{n}.key", f"{p.name}/data", f"{bk.name}/{n}/data", url)
            for n, p in servers.items()}
    assert rebal_json("replicate", "nightly", config=cfgs["fs2"])["outcome"] == "ok"  # fs2 first: the older backup
    newest = [n for n in sh("zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-s", "createtxg", "-r",
                            f"{bk.name}/fs2/data").stdout.split() if n.startswith(f"{bk.name}/fs2/data@")][-1]
    made = int(sh("zfs", "get", "-Hp", "-o", "value", "creation", newest).stdout)
    while time.time() < made + 20:  # fs2's backup must be older than fs1's by more than twice a watch's own
        time.sleep(0.2)             # run (ages are judged when the watch runs): time passing is the point here
    assert rebal_json("replicate", "nightly", config=cfgs["fs1"])["outcome"] == "ok"
    assert [p for p, _ in got] == ["/ping/0f1e/fs2/start", "/ping/0f1e/fs2", "/ping/0f1e/fs1/start", "/ping/0f1e/fs1"]

    # fs2's backup is failed over (its file server "down"); fs2's next run is refused by the gate
    bcfg = tmp_path / "backup-host.toml"
    bcfg.write_text(f'state_db = "{tmp_path / "backup.db"}"\n[[replicate]]\nname = "fs2"\ndirection = "pull"\n'
                    f'source_host = "fs2.invalid"\nsource = "{servers["fs2"].name}/data"\n'
                    f'target = "{bk.name}/fs2/data"\nrecursive = true\n')
    rebal_json("failover", "fs2", config=bcfg)
    got.clear()
    with open(os.path.join(mountpoint(f"{servers['fs2'].name}/data/home"), "g"), "wb") as f:
        f.write(os.urandom(50_000))
    r = rebal("replicate", "nightly", "--json", config=cfgs["fs2"], check=False)
    assert r.returncode != 0 and "failed over" in r.stdout + r.stderr, r.stdout + r.stderr
    assert [p for p, _ in got] == ["/ping/0f1e/fs2/start", "/ping/0f1e/fs2/fail"], got
    assert "failed over" in got[1][1], got[1][1]

    # the backup host watches both, from its authorized_keys alone
    watch = ["watch", "--authorized-keys", str(keys), "--gate-log", str(log), "--json"]
    prom = tmp_path / "watch.prom"
    first = json.loads(rebal(*watch, "--metrics", str(prom), config=bcfg, check=False).stdout)
    assert [(x["root"], x["key"]) for x in first["roots"]] == [(f"{bk.name}/fs1", "rebal@fs1"),
                                                               (f"{bk.name}/fs2", "rebal@fs2")]
    age: dict[str, float] = {}  # root -> its oldest newest-snapshot, in hours (the metrics have the seconds)
    for m in re.finditer(r'^rebal_watch_backup_age_seconds\{(.*)\} (\S+)$', prom.read_text(), re.M):
        root = re.search(r'root="([^"]*)"', m.group(1)).group(1)
        age[root] = max(age.get(root, 0.0), float(m.group(2)) / 3600)
    assert age[f"{bk.name}/fs2"] > age[f"{bk.name}/fs1"], age  # fs2 replicated first, and not since
    refused = [f for f in first["findings"] if f["subject"].startswith("gate:")]
    assert refused, first["findings"]  # (the journal may hold other keys' refusals from this host too)
    assert "failed over" in log.read_text(), log.read_text()[-2000:]
    gap = age[f"{bk.name}/fs2"] - age[f"{bk.name}/fs1"]
    t0 = time.time()
    limit = (t0 - made) / 3600 - gap / 2  # fs2 is past it whenever the watch runs; fs1 while it runs < gap/2
    r = rebal(*watch, "--max-age-hours", f"{limit:.9f}", config=bcfg, check=False)
    assert time.time() - t0 < gap * 3600 / 2, "the watch took longer than the gap allows: the test cannot judge"
    findings = json.loads(r.stdout)["findings"]
    # fs2's backup is past the maximum age, and said as what it is: failed over (served here, backed up
    # by nothing until failback), not a late backup; fs1 is within it
    late = [f for f in findings if "older than" in f["message"]]
    over = [f for f in findings if "failed over since" in f["message"]]
    assert r.returncode == 1 and late == [], findings
    assert [f["subject"] for f in over] == [f"backup:{bk.name}/fs2 (rebal@fs2)"], findings
    assert over[0]["message"].startswith(f"{bk.name}/fs2/data is failed over since ") and "rebal failback" in over[0]["message"]
