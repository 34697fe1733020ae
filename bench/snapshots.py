"""rebal's own work on a dataset with many snapshots, as the count grows (issue 48, item 4): no step may
grow faster than linearly in the snapshots. zrepl's users report half an hour of planning at 65,000
snapshots; this measures what rebal adds, with no ZFS at all (the commands a step would run are
recorded, not run: their number is printed, their time is ZFS's and the lane's to measure).

One dataset with N of the job's snapshots (one a minute, the newest the new snapshot and the base
the one before it, with its cursor bookmark), the backup holding the same ones (a job whose pruning
could not run for a long time, or that keeps them all). Per N:
  parse    the listing's text (`zfs get -Hp -o name,property,value guid,createtxg`, two lines each,
           bookmarks too) into snapshots, both sides (zfs-fuse's listing)
  parse_fast  the same from OpenZFS's fast listing (`zfs list -Hp -o name,guid,createtxg`, one line each)
  plan     the newest common snapshot and the send plan
  retain   which snapshots the target's default retention keeps (last 1, 24 hourly, 7 daily, 4
           weekly, 6 monthly) and the source's (none but the base)
  prune    the source's and the backup's pruning as the replicator runs it (retention.prune), with
           the commands it would run counted
Each step's time per snapshot is printed against its time per snapshot at the smallest N, and that
growth against the growth of a baseline measured in the same run: splitting the same listing's
lines into fields, which is linear by construction (past some 10,000 snapshots the interpreter's
own work per line grows with the memory it holds: the baseline shows how much). 1.00x is linear;
goal: no step grows more than 1.5x faster than the baseline at the largest N (room for sorting's
log N; a quadratic step would be 50x at 50,000 against 1,000).

    python3 bench/snapshots.py [--counts 1000,10000,50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rebal.process.command import Result  # noqa: E402
from rebal.replicate import retention  # noqa: E402
from rebal.replicate.policy import Buckets, plan_send, retain, snapshot_name, snapshot_time  # noqa: E402
from rebal.replicate.transport import Here  # noqa: E402
from rebal.replicate.zfs_run import DatasetReport, ZfsReport  # noqa: E402
from rebal.zfs.host import ZfsHost  # noqa: E402
from rebal.zfs.snaps import parse_list, tree_from, tree_of  # noqa: E402

GOAL = 1.5
SRC, DST, JOB = "tank/data", "backup/data", "bench"
TARGET = Buckets(last=1, hourly=24, daily=7, weekly=4, monthly=6)  # the config's defaults for a target
SOURCE = Buckets(last=0, hourly=0, daily=0, weekly=0, monthly=0)  # and for a source with bookmarks


def listing(root: str, names: list[str], bookmarks: bool) -> str:
    """The listing's text; with ``bookmarks``, the last run's cursor bookmark beside its snapshot."""
    lines = [f"{root}\tguid\t1", f"{root}\tcreatetxg\t1"]
    for i, n in enumerate(names):
        marks = ("@", "#") if bookmarks and i == len(names) - 2 else ("@",)
        for sep in marks:
            lines += [f"{root}{sep}{n}\tguid\t{1000 + i}", f"{root}{sep}{n}\tcreatetxg\t{10 + i}"]
    return "\n".join(lines) + "\n"


def fast_listing(text: str) -> str:
    """The same rows as OpenZFS's fast listing prints them (`zfs list -Hp -o name,guid,createtxg`)."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _prop, value = line.split("\t")
        rows.setdefault(name, []).append(value)
    return "".join(f"{n}\t{g}\t{t}\n" for n, (g, t) in rows.items())


def recorder(calls: list[list[str]]):
    def run(argv, **_kw) -> Result:
        calls.append(list(argv))
        return Result(list(argv), 0, "", "")
    return run


def once(n: int) -> dict[str, float | int]:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    names = [snapshot_name(JOB, t0 + timedelta(minutes=i)) for i in range(n)]
    src_text, dst_text = listing(SRC, names, True), listing(DST, names[:-1], False)
    out: dict[str, float | int] = {}

    t = time.perf_counter()  # the baseline: the interpreter's own work on the same text, linear by construction
    rows = [line.split("\t") for line in src_text.splitlines()] + [line.split("\t") for line in dst_text.splitlines()]
    assert len(rows) > n
    out["baseline"] = time.perf_counter() - t

    t = time.perf_counter()
    src_tree, dst_tree = tree_from(src_text, bookmarks=True), tree_from(dst_text)
    out["parse"] = time.perf_counter() - t
    fast = fast_listing(src_text), fast_listing(dst_text)
    t = time.perf_counter()
    fast_trees = tree_of(parse_list(fast[0]), bookmarks=True), tree_of(parse_list(fast[1]))
    out["parse_fast"] = time.perf_counter() - t
    assert fast_trees[0] == src_tree and fast_trees[1] == dst_tree

    t = time.perf_counter()
    new = next(s for s in src_tree[SRC] if s.name == names[-1] and not s.bookmark)
    plan = plan_send(SRC, src_tree[SRC], dst_tree[DST], new, False)
    assert plan.kind == "incremental" and plan.base is not None and plan.base.name == names[-2], plan
    out["plan"] = time.perf_counter() - t

    t = time.perf_counter()
    stamped = [(s, snapshot_time(s)) for s in names]
    keep_t = retain(stamped, TARGET, {names[-1]})
    keep_s = retain(stamped, SOURCE, {names[-1]})
    assert names[-1] in keep_t and keep_s == {names[-1]}
    out["retain"] = time.perf_counter() - t

    calls: list[list[str]] = []
    report = ZfsReport(snapshot=names[-1])
    report.datasets.append(DatasetReport(SRC, DST, "incremental", base=names[-2], cursor="bookmark"))
    dst_tree = tree_from(listing(DST, names, False))  # after the send: the new snapshot landed
    rep = SimpleNamespace(job=SimpleNamespace(name=JOB, source=SRC, recursive=False, pull=False,
                                              retention_source=SOURCE,
                                              retention_target=TARGET),
                          report=report, source_tree=src_tree, target_tree=dst_tree, gate=None,
                          source=ZfsHost(Here(recorder(calls))), target=ZfsHost(Here(recorder(calls))), bookmarks=True,
                          target_of=lambda ds: DST + ds[len(SRC):])
    t = time.perf_counter()
    retention.prune(rep, [SRC])
    out["prune"] = time.perf_counter() - t
    assert len(report.pruned_source) == n, (len(report.pruned_source), report.notes[:3])  # a bookmark keeps the base
    out["commands"] = len(calls)
    out["pruned"] = len(report.pruned_source) + len(report.pruned_target)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1000,10000,50000")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per count")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    steps = ("parse", "parse_fast", "plan", "retain", "prune")
    best: dict[int, dict[str, float | int]] = {}
    for n in counts:
        runs = [once(n) for _ in range(a.repeat)]
        best[n] = {k: min(r[k] for r in runs) for k in runs[0]}
    base = counts[0]
    print(f"rebal's own work per snapshot against {base} snapshots (1.00x: linear), best of {a.repeat}; "
          "in brackets against the baseline's growth")
    worst = 0.0
    for n in counts:
        b = best[n]
        grow = (b["baseline"] / n) / (best[base]["baseline"] / base)
        parts = [f"baseline {b['baseline'] * 1000:7.1f} ms {grow:4.2f}x"]
        for s in steps:
            ratio = (b[s] / n) / (best[base][s] / base)
            if n != base:
                worst = max(worst, ratio / grow)
            parts.append(f"{s} {b[s] * 1000:7.1f} ms {ratio:4.2f}x ({ratio / grow:4.2f}x)")
        print(f"  {n:>6}: " + "  ".join(parts) + f"  commands {b['commands']} for {b['pruned']} pruned")
    print(f"goal: no step over {GOAL:.1f}x the baseline's growth at {counts[-1]}: worst {worst:.2f}x, "
          + ("met" if worst <= GOAL else "NOT met"))
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
