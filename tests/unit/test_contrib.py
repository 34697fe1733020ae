"""The fleet files in contrib/ (issue 15): the alert rules pass real promtool's check and unit tests
(Debian's prometheus package; scripts/setup.sh installs it), and the dashboard and the rules use
only metric names that `rebal metrics` writes."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import IN_CI, fixture_text

from rebal import metrics
from rebal.zfs.parse import parse_zpool_list_hp

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "contrib" / "prometheus"
DASH = ROOT / "contrib" / "grafana" / "rebal.json"
NAME = re.compile(r"\brebal_[a-z_]+\b")


def promtool() -> str:
    p = shutil.which("promtool")
    if p is None:
        if IN_CI:
            pytest.fail("promtool is missing (Debian package prometheus; bash scripts/setup.sh installs it)")
        pytest.skip("promtool is not installed (bash scripts/setup.sh installs Debian's prometheus package)")
    return p


def written_names() -> set[str]:
    """Every family `rebal metrics` writes, from the renderer given every kind of input."""
    [pool] = parse_zpool_list_hp(fixture_text("tank-imbalanced_zpool-list-v-Hp.txt"))
    text = metrics.render(
        [pool], {pool.name: 1},
        [{"job": "nightly", "last_success": 1.7e9, "bytes": 123, "age_seconds": 60,
          "points": {"max_age_hours": 26, "datasets": {"tank/a": ("rebal-nightly-x", 1.7e9), "tank/b": None}}}],
        [{"pool": pool.name, "running": True, "bytes": 10, "files": 1}],
        scrubs={pool.name: 1.7e9}, created={pool.name: 1.6e9},
        limits={"target_spread": 10, "scrub_max_age_days": 35, "replication_max_age_hours": 36}, now=1.7e9)
    return {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}


def test_promtool_checks_and_tests_the_rules():
    tool = promtool()
    r = subprocess.run([tool, "check", "rules", "rebal.rules.yml"], cwd=PROM, capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS: 10 rules found" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([tool, "test", "rules", "rebal.rules.test.yml"], cwd=PROM, capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_alert_fires_in_the_tests():
    """promtool fails a test on any alert it did not expect, so each test's series that should not
    fire (the second server, the fresh pool) are checked by it; here: every alert fires somewhere."""
    rules = (PROM / "rebal.rules.yml").read_text()
    tests = (PROM / "rebal.rules.test.yml").read_text()
    alerts = re.findall(r"- alert: (\w+)", rules)
    assert len(alerts) == 10
    for a in alerts:
        blocks = re.findall(rf"alertname: {a}\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n\s+- name|\Z)", tests, re.S)
        assert any("exp_labels" in b for b in blocks), f"{a} never fires in the tests"


def test_dashboard_loads_and_uses_only_metrics_rebal_writes():
    dash = json.loads(DASH.read_text())
    assert dash["panels"] and dash["title"].startswith("rebal")
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dash["templating"]["list"]]
    used = {n for e in exprs for n in NAME.findall(e)}
    have = written_names()
    assert used and used <= have, sorted(used - have)
    # the dashboard shows what the issue asks: CAP over time, spread, health, replication age and bytes,
    # rebalance progress
    for must in ("rebal_vdev_capacity_percent", "rebal_pool_spread_points", "rebal_pool_health",
                 "rebal_replication_last_success_timestamp_seconds", "rebal_replication_last_bytes",
                 "rebal_rebalance_bytes"):
        assert must in used, must
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_rules_use_only_metrics_rebal_writes():
    used = set(NAME.findall((PROM / "rebal.rules.yml").read_text()))
    assert used and used <= written_names(), sorted(used - written_names())


def test_replication_label_does_not_clash_with_prometheus_job():
    text = metrics.render([], {}, [{"job": "nightly", "last_success": 1.0, "bytes": 1, "age_seconds": 1}], [],
                          limits={"replication_max_age_hours": 1}, now=2.0)
    assert 'replication_job="nightly"' in text and ' job="' not in text and "{job=" not in text
