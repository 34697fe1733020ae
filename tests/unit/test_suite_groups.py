"""scripts/test.sh runs the suite on two workers with `--dist loadgroup`: every test that reaches
ZFS must be in the one group a single worker runs (two or three at once deadlocked zfs-fuse on
2026-12-07), and the unit tests stay free to run beside them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = '''
def pytest_collection_finish(session):
    for item in session.items:
        groups = [m.args[0] for m in item.iter_markers("xdist_group")]
        print("GROUPS", item.nodeid, "zfs_ready" in item.fixturenames, ",".join(groups) or "-", sep="\\t")
'''


def test_every_test_that_reaches_zfs_is_in_the_one_group_and_unit_tests_are_free(tmp_path):
    (tmp_path / "groupcheck.py").write_text(PLUGIN)
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "groupcheck", "-m", "not alone",
                        "tests"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rows = [line.split("\t") for line in r.stdout.splitlines() if line.startswith("GROUPS\t")]
    assert len(rows) > 500, r.stdout[-2000:]
    loose = [node for _, node, ready, group in rows
             if (not node.startswith("tests/unit/") or ready == "True") and group != "zfs-fuse"]
    assert loose == [], loose[:10]
    free = [node for _, node, ready, group in rows if group == "-"]
    assert len(free) > 300 and all(n.startswith("tests/unit/") for n in free), free[:10]
    assert "tests/unit/test_suite_groups.py::test_every_test_that_reaches_zfs_is_in_the_one_group_and_unit_tests_are_free" in free
