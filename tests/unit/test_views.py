"""The views are pure: result objects in, text or dicts out. Built here from recorded OpenZFS output
and hand-made results, without ZFS."""

from __future__ import annotations

from conftest import fixture_text

from rebal.rebalance.planner import DirEntry, VdevFill, make_plan
from rebal.rebalance.options import Target
from rebal.rebalance.prepare import Prepared
from rebal.rebalance.runstate import Report
from rebal.rebalance.scan import ScanResult, Skips
from rebal.state import SampleRow
from rebal.views import rebalance as RV
from rebal.views import replicate as PV
from rebal.views import status as SV
from rebal.views.text import age, table
from rebal.zfs.parse import parse_zpool_list_hp


def imbalanced():
    [pool] = parse_zpool_list_hp(fixture_text("tank-imbalanced_zpool-list-v-Hp.txt"))
    return pool


def test_table_aligns_and_cuts_trailing_space():
    rows = table([("A", "BB", "C"), ("long", "1", "")], right={1})
    assert rows == ["A     BB  C", "long   1"]


def test_age_units():
    assert age(30) == "30 s" and age(90) == "1.5 min" and age(7200) == "2.0 h" and age(86400 * 3) == "3.0 d"


def test_status_text_lists_every_data_vdev_and_the_verdict():
    pool = imbalanced()
    text = SV.status_text([pool], 10.0, [])
    assert text.startswith(f"{pool.name}  ")
    assert f"spread {pool.spread:.1f} points (over the target 10)" in text
    for v in pool.data_vdevs:
        assert f"{v.cap:.1f}%" in text
    assert SV.status_text([], 10.0, []) == "no pools imported\n"


def test_status_text_replication_lines():
    text = SV.status_text([], 10, [
        {"job": "a", "mode": "zfs", "last_success": None, "age_seconds": None, "snapshot": None},
        {"job": "b", "mode": "rsync", "last_success": 0.0, "age_seconds": 7200, "snapshot": "rebal-b-x"},
    ])
    assert "replication a (zfs): never succeeded" in text
    assert "replication b (rsync): last success 1970-01-01" in text and "2.0 h ago, snapshot rebal-b-x" in text


def test_history_text():
    rows = [SampleRow(1000.0 + i, 20.0 - i, {"mirror-0": (100, 80 - i), "mirror-1": (100, 20 + i)}) for i in range(3)]
    text = SV.history_text("tank", rows)
    assert text.splitlines()[0].startswith("tank: 3 samples, ")
    assert "mirror-0" in text and "78.0%" in text and "22.0%" in text
    assert "no samples of pool tank yet" in SV.history_text("tank", [])


def _prep():
    pool = imbalanced()
    fills = [VdevFill(v.name, v.size, v.alloc) for v in pool.data_vdevs]
    dirs = [DirEntry(b"/tank/a", 10, 5 << 30), DirEntry(b"/tank/b", 3, 1 << 20)]
    skips = Skips()
    skips.add("hardlinked", b"/tank/a/x", 4096)
    sc = ScanResult(dirs, files=13, bytes=sum(d.bytes for d in dirs), skips=skips)
    plan = make_plan(fills, dirs, 10.0)
    return Prepared(pool, [Target("tank/data", "/tank", b"/tank")], sc, plan, "copy", False, 4, [],
                    ["a warning"], ["a note"], resume_run=7, done_dirs={b"/tank/c"})


def test_plan_json_and_text_agree():
    prep = _prep()
    d = RV.plan_json(prep)
    assert d["pool"] == prep.pool.name and d["method"] == "copy" and d["files_eligible"] == 13
    assert [v["name"] for v in d["vdevs"]] == [v.name for v in prep.pool.data_vdevs]
    assert d["skipped"]["hardlinked"] == {"count": 1, "bytes": 4096, "examples": ["/tank/a/x"]}
    assert d["resumes_run"] == 7 and d["warnings"] == ["a warning"]
    text = RV.plan_text(prep)
    assert f"spread now {prep.plan.spread_before:.1f} points, target 10" in text
    assert "/tank/a" in text and "warning: a warning" in text and "note: a note" in text
    assert "continues unfinished run 7 (1 directories already done)" in text
    assert "1 hardlinked, 4.00K" in text


def test_a_plan_with_nothing_to_do_warns_of_no_rewrite_cost():
    """Issue 69 (9): a spread already under the target printed "nothing to do", then a snapshot
    warning about hundreds of MiB to rewrite."""
    from dataclasses import replace

    prep = _prep()
    prep = replace(prep, plan=replace(prep.plan, dirs=[]),
                   warnings=["620M of the data to rewrite is held by 2 snapshot(s) (newest x): rewriting it grows "
                             "the pool by that much instead of moving it", "another warning"])
    text = RV.plan_text(prep)
    assert "620M" not in text and "warning: another warning" in text, text


def test_report_and_runs_text():
    rep = Report(5, "ok", "spread 3.0 is under the target 10", files=12, bytes=3 << 20, dirs=2,
                 skipped={"in-use": 1}, spread_before=20, spread_after=3, predicted_after=4, seconds=2.7,
                 scan_seconds=2.7)
    text = RV.report_text(rep)
    assert text.startswith("ok: spread 3.0") and "rewrote 12 files, 3.00M in 2 directories" in text
    assert "in 2.7 s" in text and "5.4 s with the scan" in text, text  # the whole command's time too
    assert "20.0 -> 3.0 points (predicted 4.0); run 5" in text and "skipped: 1 in-use" in text
    runs = [{"id": 5, "kind": "rebalance", "job": None, "pool": "tank", "started": "2026-11-23T10:00:00Z",
             "outcome": "failed", "error": "read-only file system", "details": rep.as_dict()}]
    rt = RV.runs_text(runs)
    assert "failed (read-only file system)" in rt and "20.0->3.0" in rt
    # a long error does not make a row of 230 columns (issue 69 item 9): cut, whole in --json
    long = [dict(runs[0], error="the target rbt/x/no/parent of job w does not exist on the backup host: " * 3)]
    assert max(len(line) for line in RV.runs_text(long).splitlines()) < 140
    assert RV.runs_text([]) == "no runs recorded yet\n"


def test_runs_text_shows_every_kind_of_run_as_recorded():
    """A verify run records its files and bytes as pairs (source, backup), or none where it compared
    nothing: `rebal runs` showed a traceback after any verify (issue 36)."""
    runs = [
        {"id": 9, "kind": "verify", "job": "nightly", "pool": None, "started": "2026-11-26T02:30:00Z", "outcome": "ok",
         "error": None, "details": {"files": [120, 120], "bytes": [3 << 20, 3 << 20], "findings": []}},
        {"id": 8, "kind": "verify", "job": "nightly", "pool": None, "started": "2026-11-26T02:00:00Z",
         "outcome": "warning", "error": None, "details": {"files": None, "bytes": None, "findings": []}},
        {"id": 7, "kind": "metrics", "job": None, "pool": None, "started": "2026-11-26T01:00:00Z", "outcome": "ok",
         "error": None, "details": {"file": "/x.prom", "bytes": "many"}},
    ]
    lines = RV.runs_text(runs).splitlines()
    assert "120/120" in lines[1] and "3.00M/3.00M" in lines[1]
    assert lines[2].split()[:2] == ["8", "verify"] and "warning" in lines[2]
    assert lines[3].split()[:2] == ["7", "metrics"]


def test_replication_text():
    d = {"job": "n", "mode": "zfs", "snapshot": "rebal-n-1", "bytes": 2048, "seconds": 1.5, "run_id": 3,
         "datasets": [{"source": "tank/d", "target": "b/d", "kind": "incremental", "base": "rebal-n-0", "bytes": 2048}],
         "resumed": ["tank/d@rebal-n-1"], "notes": ["x", "x"]}
    text = PV.replication_text("ok", d)
    assert text.splitlines()[0] == "ok: job n (zfs), snapshot rebal-n-1, 2.00K sent in 1.5 s (run 3)"
    assert "tank/d -> b/d: incremental from @rebal-n-0, 2.00K" in text and "resumed: tank/d@rebal-n-1" in text
    assert text.count("note: x") == 1
    dry = PV.replication_text("ok", {"dry_run": True, "job": "n", "mode": "zfs", "planned": ["zfs snapshot x"]})
    assert "would run: zfs snapshot x" in dry


def test_replication_text_resumed_and_renamed():
    d = {"job": "n", "mode": "zfs", "snapshot": "s2", "bytes": 3 << 20, "seconds": 1, "run_id": 4, "datasets": [
        {"source": "t/d", "target": "b/d", "kind": "resumed", "base": "t/d@s1", "bytes": 2 << 20, "expected": 2 << 20},
        {"source": "t/d/x", "target": "b/d/x", "kind": "renamed", "base": None, "bytes": 0},
    ], "warnings": ["t/d/x was renamed"]}
    text = PV.replication_text("warning", d)
    assert "t/d -> b/d: resumed t/d@s1, sent 2.00M of the 2.00M left" in text
    assert "t/d/x -> b/d/x: not sent (renamed; see the warning)" in text and "warning: t/d/x was renamed" in text


def test_plan_text_after_a_raidz_expansion_shows_the_reclaim_not_a_spread():
    prep = _prep()
    prep.reclaim_only = True
    prep.reclaim = {"vdevs": [{"vdev": "raidz1-0", "width_before": 3, "width_after": 4, "parity": 1,
                               "reclaim_fraction": 1 / 9}], "old_ratio_files": 30, "old_ratio_bytes": 9 << 20,
                    "how": "estimated", "reclaim_bytes": 1 << 20, "goal": "reclaim"}
    text = RV.plan_text(prep)
    assert "raidz1-0 grew from 3 to 4 disks (raidz1; a rewrite returns 11.1%" in text
    assert "about 9.00M in 30 files" in text and "returns about 1.00M of free space; goal: reclaim" in text
    assert "predicted spread" not in text and "nothing to do" not in text
    assert RV.plan_json(prep)["expansion"]["goal"] == "reclaim"


def test_a_plan_of_everything_says_what_all_of_it_predicts():
    prep = _prep()
    fills = [VdevFill(v.name, v.size, v.alloc) for v in prep.pool.data_vdevs]
    prep.plan = make_plan(fills, prep.scan.dirs, 10.0, everything=True)
    text = RV.plan_text(prep)
    assert f"rewriting everything eligible (--all): {prep.plan.spread_after:.1f} points" in text
    assert "13 files" in text and "after rewriting about" not in text


def test_the_reason_of_a_run_says_the_settled_spread():
    """The reason line is made again from the settled measurement at the end of a run, so it never
    contradicts the figures under it (issue 36: '24.2 until then' above 'spread 29.2 -> 23.2')."""
    from types import SimpleNamespace

    from rebal.rebalance.engine import _goal

    def run(now, freed=None):
        return SimpleNamespace(spread_now=now, opts=SimpleNamespace(target_spread=10),
                               report=SimpleNamespace(spread_when_freed=freed))

    assert _goal(run(8.04)) == "spread 8.0 is under the target 10"
    assert _goal(run(10.6)).startswith("spread 10.6: the target 10 was reached before the last frees settled")
    assert _goal(run(23.2, freed=8.5)).endswith("once the snapshots holding the old copies go; 23.2 until then")


def test_the_replication_bar_says_sizes_as_rebal_does_with_a_total_and_time_left():
    """issue 36: '120.5/? MiB', a first rate of '170.1 GB/s', units mixed."""
    from types import SimpleNamespace

    from rebal.cli.progress import _byte_columns

    size, rate, left = _byte_columns()
    first = SimpleNamespace(completed=300 << 20, total=None, elapsed=0.01)
    assert str(size.render(first)) == "300M of ?" and str(rate.render(first)) == "-/s" and str(left.render(first)) == ""
    later = SimpleNamespace(completed=600 << 20, total=1800 << 20, elapsed=60.0)
    assert str(size.render(later)) == "600M of 1.76G (estimate)"
    assert str(rate.render(later)) == "10.0M/s" and str(left.render(later)) == "about 2:00 left"
