"""`rebal watch` on a backup host (issue 68): two file servers' gated keys into one pool, each with
its own root; the watch finds both roots from authorized_keys alone (no config of theirs), says the
age of each backup's newest snapshot, flags a dataset with none and one older than the maximum, and
the gate's refusals since the last watch (a real `rebal gate` refusing a destroy, logged to a file)."""

from __future__ import annotations

import json

import pytest
from conftest import rebal
from zfsenv import sh

pytestmark = pytest.mark.zfs

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTestOnlyNotUsedToConnect0000"


def test_two_file_servers_watched_from_the_gated_keys(make_pool, tmp_path):
    bk = make_pool([[]], size="128M")
    for ds in ("fs1", "fs1/home", "fs2", "fs2/data"):
        sh("zfs", "create", f"{bk.name}/{ds}")
    sh("zfs", "snapshot", f"{bk.name}/fs1/home@rebal-nightly-20261206T010000Z")  # fs2/data: nothing received yet
    keys = tmp_path / "authorized_keys"
    log = tmp_path / "gate.log"
    keys.write_text(
        "# the backup host's keys\n"
        f'command="rebal gate --receive-into {bk.name}/fs1 --log {log}",restrict ssh-ed25519 {KEY} rebal@fileserver1\n'
        f'restrict,command="rebal gate --receive-into {bk.name}/fs2" ssh-ed25519 {KEY} rebal@fileserver2\n'
        f"ssh-ed25519 {KEY} admin@laptop\n")
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n')

    r = rebal("watch", "--authorized-keys", str(keys), "--gate-log", str(log), "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["level"] == "WARNING", out
    assert [(x["root"], x["key"]) for x in out["roots"]] == [(f"{bk.name}/fs1", "rebal@fileserver1"),
                                                            (f"{bk.name}/fs2", "rebal@fileserver2")]
    newest = out["roots"][0]["newest"][f"{bk.name}/fs1/home"]
    assert newest["snapshot"] == "rebal-nightly-20261206T010000Z" and newest["age_hours"] < 1
    said = [f["message"] for f in out["findings"] if f["subject"].startswith(f"backup:{bk.name}/fs2")]
    assert said and f"{bk.name}/fs2/data" in said[0] and "no snapshot" in said[0], out["findings"]
    assert not any(f["subject"].startswith(f"backup:{bk.name}/fs1") for f in out["findings"]), out["findings"]

    # a backup older than the maximum is flagged, with its age
    r = rebal("watch", "--authorized-keys", str(keys), "--gate-log", str(log), "--max-age-hours", "0.00001",
              "--json", config=cfg, check=False)
    old = [f["message"] for f in json.loads(r.stdout)["findings"] if f["subject"].startswith(f"backup:{bk.name}/fs1")]
    assert old and "older than" in old[0] and f"{bk.name}/fs1/home" in old[0], old

    # a file server's key trying a destroy: the gate refuses and logs it; the next watch says so, once
    g = rebal("gate", "--receive-into", f"{bk.name}/fs1", "--log", str(log), "--command",
              f"zfs destroy -r {bk.name}/fs1", config=cfg, check=False)
    assert g.returncode == 2
    r = rebal("watch", "--authorized-keys", str(keys), "--gate-log", str(log), "--json", config=cfg, check=False)
    gate = [f for f in json.loads(r.stdout)["findings"] if f["subject"].startswith("gate:")]
    assert len(gate) == 1 and "1 command(s) refused" in gate[0]["message"] and "destroy" in gate[0]["message"], gate
    r = rebal("watch", "--authorized-keys", str(keys), "--gate-log", str(log), "--json", config=cfg, check=False)
    assert json.loads(r.stdout)["refused"] == 0  # said once: since the last watch
    prom = tmp_path / "watch.prom"
    text = rebal("watch", "--authorized-keys", str(keys), "--gate-log", str(log), "--metrics", str(prom),
                 config=cfg, check=False).stdout
    assert f"{bk.name}/fs1 (rebal@fileserver1): 2 dataset(s)" in text, text
    # the figures for Prometheus: real promtool's check, and the values read back
    import subprocess

    from prometheus_client.parser import text_string_to_metric_families

    r = subprocess.run(["promtool", "check", "metrics"], input=prom.read_text(), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    [age] = fams["rebal_watch_backup_age_seconds"].samples
    assert age.labels == {"root": f"{bk.name}/fs1", "dataset": f"{bk.name}/fs1/home"} and 0 <= age.value < 3600
    none = {s.labels["root"]: s.value for s in fams["rebal_watch_datasets_without_snapshot"].samples}
    assert none == {f"{bk.name}/fs1": 0, f"{bk.name}/fs2": 1}
    assert fams["rebal_watch_level"].samples[0].value == 1


def test_nothing_to_watch_is_said(tmp_path):
    keys = tmp_path / "authorized_keys"
    keys.write_text(f"ssh-ed25519 {KEY} admin@laptop\n")
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n')
    r = rebal("watch", "--authorized-keys", str(keys), config=cfg, check=False)
    assert r.returncode == 2 and "nothing to watch" in r.stderr, r.stderr
    keys.write_bytes(b"\xff\xfe not text\n")  # a stray byte in the key file: said, not a traceback
    r = rebal("watch", "--authorized-keys", str(keys), config=cfg, check=False)
    assert r.returncode == 2 and "nothing to watch" in r.stderr, r.stderr
    r = rebal("watch", "--root", "bad name", config=cfg, check=False)
    assert r.returncode == 2 and "--root bad name" in r.stderr, r.stderr
