"""Dead-man pings (issue 68): a replication job with a ping_url tells a real HTTP server on loopback
(a monitor, as healthchecks.io takes them) when it starts and how it ended; a monitor that does not
answer is a warning of the run, never its failure."""

from __future__ import annotations

import json
import socket

import pytest
from conftest import rebal, rebal_json
from zfsenv import sh

pytestmark = pytest.mark.zfs


def job_cfg(tmp_path, source: str, target: str, url: str):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "j"\nsource = "{source}"\n'
                   f'target = "{target}"\nping_url = "{url}"\n')
    return cfg


def test_a_run_pings_start_and_success_and_a_failed_one_start_and_fail(make_pool, tmp_path, monitor):
    url, got = monitor
    pool = make_pool([[]], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    (pool.mountpoint / "data" / "f").write_bytes(b"x" * 5000)
    cfg = job_cfg(tmp_path, f"{pool.name}/data", f"{pool.name}/copy", url)
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    assert [p for p, _ in got] == ["/ping/0f1e/start", "/ping/0f1e"], got
    assert "rebal replicate j: ok" in got[1][1] and f"{pool.name}/data" in got[1][1], got[1][1]
    # a run that fails (its backup's pool is not there) pings start and fail, with the error as the body
    got.clear()
    cfg = job_cfg(tmp_path, f"{pool.name}/data", "rbtnosuchpool/copy", url)
    r = rebal("replicate", "j", "--json", config=cfg, check=False)
    assert r.returncode != 0
    assert [p for p, _ in got] == ["/ping/0f1e/start", "/ping/0f1e/fail"], got
    assert "rebal replicate j: failed" in got[1][1], got[1][1]
    # a dry run pings nothing
    got.clear()
    rebal("replicate", "j", "--dry-run", config=cfg, check=False)
    assert got == []


def test_a_monitor_that_does_not_answer_is_a_warning_not_a_failure(make_pool, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = make_pool([[]], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    cfg = job_cfg(tmp_path, f"{pool.name}/data", f"{pool.name}/copy", f"http://127.0.0.1:{port}/p")
    out = json.loads(rebal("replicate", "j", "--json", config=cfg).stdout)
    assert out["outcome"] in ("ok", "warning"), out
    said = " ".join(out.get("warnings", []))
    assert "the start ping to" in said and "the success ping to" in said and "did not get through" in said, out


def test_a_ping_url_that_is_not_http_is_refused_by_the_config(tmp_path):
    cfg = job_cfg(tmp_path, "tank/data", "tank/copy", "file:///etc/passwd")
    r = rebal("config", "check", str(cfg), check=False)
    assert r.returncode == 2 and "ping_url" in r.stderr and "http://" in r.stderr, r.stderr
