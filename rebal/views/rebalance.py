"""`rebal plan`, the rebalance report and `rebal runs`, as text and as JSON-ready dicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import os

from .. import fill
from ..outcome import Outcome
from ..units import human
from .text import lines, table

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..rebalance.prepare import Prepared
    from ..rebalance.runstate import Report


def plan_json(prep: Prepared) -> dict:
    plan = prep.plan
    after = {v.name: v for v in plan.after}
    return {
        "pool": prep.pool.name,
        "targets": [{"dataset": t.dataset, "path": os.fsdecode(t.root)} for t in prep.targets],
        "method": prep.method + (" -P" if prep.physical else ""),
        "jobs": prep.jobs,
        "target_spread": plan.target,
        "spread_now": round(plan.spread_before, 2),
        "spread_predicted": round(plan.spread_after, 2),
        "bytes_needed": plan.needed_bytes,
        "bytes_planned": plan.bytes,
        "files_planned": plan.files,
        "bytes_eligible": plan.candidate_bytes,
        "files_eligible": prep.scan.files,
        "scan_seconds": round(prep.scan_seconds, 2),
        "pinned_bytes": prep.scan.pinned_bytes,
        "vdevs": [
            {"name": v.name, "size": v.size, "alloc": v.alloc, "cap": round(v.cap, 2),
             "predicted_alloc": after[v.name].alloc, "predicted_cap": round(after[v.name].cap, 2)}
            for v in plan.before
        ],
        "placement": "measured" if plan.measured else "model",
        "dirs": [{"path": os.fsdecode(d.path), "files": d.files, "bytes": d.bytes}
                 | ({"placement": dict(zip((v.name for v in plan.before), d.placement))} if d.placement else {})
                 for d in plan.dirs],
        "skipped": {
            k: {"count": n, "bytes": prep.scan.skips.bytes.get(k, 0), "examples": prep.scan.skips.examples.get(k, [])}
            for k, n in prep.scan.skips.counts.items()
        },
        "warnings": prep.warnings,
        "notes": prep.notes,
        "resumes_run": prep.resume_run,
        "expansion": prep.reclaim,
        "snapshots": (prep.costs or {}).get("snapshots", []),
        "replication": (prep.costs or {}).get("replication", []),
        "growth": (prep.costs or {}).get("growth"),
        "bytes_moved": plan.moved,
        "steer": _steer_json(prep),
    }


def _steer_json(prep: Prepared) -> dict | None:
    """Steering: the threshold (None: not steered) and why; steered, the unsteered plan beside it."""
    steer = getattr(prep, "steer", None)
    if steer is None:
        return None
    un = prep.unsteered
    return {"threshold": steer.threshold, "said": steer.reason, "lowered_for": steer.lowered_for,
            "unsteered": None if un is None else {"bytes_planned": un.bytes, "bytes_needed": un.needed_bytes,
                                                   "bytes_moved": un.moved, "spread_predicted": round(un.spread_after, 2)}}


def _steer_lines(prep: Prepared) -> list[str]:
    """What is rewritten for what moves, and, steered, what the same goal takes unsteered."""
    plan, un = prep.plan, getattr(prep, "unsteered", None)
    if not plan.dirs or prep.reclaim_only:
        return []
    out = [f"rewrites {human(plan.bytes)} in {len(plan.dirs)} directories for about {human(plan.moved)} to leave "
           f"the fuller vdevs ({plan.bytes / max(plan.moved, 1):.2f}x)"]
    if un is not None:
        out.append(f"unsteered it would rewrite {human(un.bytes)} in {len(un.dirs)} directories "
                   f"({un.bytes / max(un.moved, 1):.2f}x, spread {un.spread_after:.1f}): steering saves "
                   f"{human(max(un.bytes - plan.bytes, 0))}")
    return out


def plan_text(prep: Prepared, max_dirs: int = 30) -> str:
    plan = prep.plan
    out = [f"{prep.pool.name}: spread now {plan.spread_before:.1f} points, target {plan.target:g}; "
           f"method: {prep.method}{' -P' if prep.physical else ''}, {prep.jobs} files at once"]
    after = {v.name: v for v in plan.after}
    rows = [("VDEV", "SIZE", "ALLOC", "CAP NOW", "CAP AFTER (predicted)")]
    for v in plan.before:
        rows.append((v.name, human(v.size), human(v.alloc), f"{v.cap:.1f}%", f"{after[v.name].cap:.1f}%"))
    out += table(rows, right={1, 2, 3, 4})
    rc = prep.reclaim
    if rc:
        for e in rc["vdevs"]:
            out.append(f"RAIDZ expansion: {e['vdev']} grew from {e['width_before']} to {e['width_after']} disks "
                       f"(raidz{e['parity']}; a rewrite returns {100 * e['reclaim_fraction']:.1f}% of what it rewrites)")
        out.append(f"at the old data:parity ratio: about {human(rc['old_ratio_bytes'])} in {rc['old_ratio_files']} files "
                   f"({rc['how']})")
        out.append(f"a rewrite of it returns about {human(rc['reclaim_bytes'])} of free space; goal: {rc['goal']}")
    if not prep.reclaim_only:  # one expanded vdev has no spread to predict: the reclaim says it all
        out.append(_spread_line(prep))
        out += _steer_lines(prep)
    if plan.dirs:
        out.append("")
        out.append(f"directories to rewrite, in order ({len(plan.dirs)}; the rebalance measures the pool after "
                   "each: it stops at the first under the target, and goes on past them if the spread is still over)"
                   + (", fullest-vdev data first (measured placement):" if plan.measured else ":"))
        from ..rebalance.planner import overfull

        over = overfull(plan.before)
        dir_rows = [("BYTES", "FILES", "ON FULL VDEVS", "DIRECTORY")]
        for e in plan.dirs[:max_dirs]:
            on = (f"{100 * sum(b for b, o in zip(e.placement, over) if o) / max(1, sum(e.placement)):.0f}%"
                  if e.placement else "-")
            dir_rows.append((human(e.bytes), str(e.files), on, os.fsdecode(e.path)))
        if len(plan.dirs) > max_dirs:
            dir_rows.append(("", "", "", f"... and {len(plan.dirs) - max_dirs} more (--json lists all)"))
        out += table(dir_rows, right={0, 1, 2})
    idle = not plan.dirs  # nothing to rewrite: what a rewrite would cost (snapshots, growth) is no concern
    out += [] if idle else _costs_lines(prep.costs)
    skips = prep.scan.skips
    if skips.counts:
        out.append("")
        out.append("left alone:")
        for k, n in skips.counts.items():
            b = skips.bytes.get(k, 0)
            out.append(f"  {n} {k}" + (f", {human(b)}" if b else "") + f"  (e.g. {skips.examples[k][0]})")
    out += [f"warning: {w}" for w in prep.warnings if not (idle and "snapshot" in w)]
    out += [f"note: {n}" for n in prep.notes]
    out.append(f"note: scanned {prep.scan.files} eligible files in {len(prep.scan.dirs)} directories in "
               f"{prep.scan_seconds:.1f} s")
    if prep.resume_run is not None:
        out.append(f"note: continues unfinished run {prep.resume_run} ({len(prep.done_dirs)} directories already done)")
    return lines(out)


def _costs_lines(costs: dict | None) -> list[str]:
    """Snapshots that hold data to rewrite, replication growth, the pool's temporary growth."""
    if not costs or not (costs["snapshots"] or costs["replication"]):
        return []
    out = [""]
    if costs["snapshots"]:
        out.append("snapshots holding data to rewrite (a rewrite leaves their copy allocated until they go):")
        rows = [("HOLDS", "ONLY IT", "OWNER", "GOES", "SNAPSHOT")]
        for sn in costs["snapshots"]:
            owner = sn["owner"] if sn["owner"].startswith("rebal:") else (sn["tool"] or "other")
            rows.append((human(sn["pinned_bytes"]), human(sn["used_bytes"]), owner, sn["expires_when"], sn["name"]))
        out += table(rows, right={0, 1})
        g = costs["growth"]
        fits = "fits above the reserve" if g["fits_reserve"] else "does NOT fit above the reserve"
        budget = f"; budget --max-growth {human(g['budget'])}" if g.get("budget") is not None else ""
        out.append(f"the pool grows by about {human(g['bytes'])} while they stay ({fits}: {human(g['available'])} "
                   f"available, reserve {human(g['reserve'])}{budget})")
    for r in costs["replication"]:
        out.append(f"replication job {r['job']} ({r['mode']}): the next incremental grows by about "
                   f"{human(r['next_incremental_bytes'])} ({r['why']})")
    return out


def _spread_line(prep: Prepared) -> str:
    plan = prep.plan
    if plan.everything:  # --all: every eligible file goes, whatever the target
        reach = ("the spread is within the target already" if plan.needed_bytes == 0 else
                 "the target is not reachable with these directories" if plan.needed_bytes is None else
                 f"the target is reached after about {human(plan.needed_bytes)}")
        return (f"predicted spread after rewriting everything eligible (--all): {plan.spread_after:.1f} points, "
                f"{human(plan.candidate_bytes)} in {prep.scan.files} files ({reach})")
    if plan.needed_bytes == 0:
        return "the spread is already within the target: nothing to do"
    if plan.needed_bytes is None:
        return (f"predicted spread after rewriting everything eligible: {plan.spread_after:.1f} points "
                "(the target is not reachable with these directories)")
    return (f"predicted spread after: {plan.spread_after:.1f} points, after rewriting about "
            f"{human(plan.needed_bytes)} (of {human(plan.candidate_bytes)} eligible in {prep.scan.files} files)")


def report_text(rep: Report) -> str:
    rate = rep.bytes / rep.seconds if rep.seconds else 0
    out = [f"{rep.outcome}: {rep.reason}",
           f"rewrote {rep.files} files, {human(rep.bytes)} in {rep.dirs} directories"
           + (f" (and {rep.dirs_partial} in part)" if getattr(rep, "dirs_partial", 0) else "")
           + f" in {rep.seconds:.1f} s "
           f"({human(rate)}/s; {rep.scan_seconds + rep.seconds:.1f} s with the scan); spread {rep.spread_before:.1f} -> {rep.spread_after:.1f} points "
           f"(predicted {rep.predicted_after:.1f}); run {rep.run_id}"]
    if getattr(rep, "steered", None) is not None:
        out.append(f"steered: zfs_mg_noalloc_threshold was {rep.steered} during the run, and is put back")
    if getattr(rep, "growth", 0):
        out.append(f"the pool grew by about {human(rep.growth)}: rewritten data that snapshots still hold; it returns "
                   f"and the balance shows when they go ({', '.join(rep.waiting_on[-3:])})")
    if rep.reclaim and "available_after" in rep.reclaim:
        rc = rep.reclaim
        out.append(f"free space {human(rc['available_before'])} -> {human(rc['available_after'])}: reclaimed "
                   f"{human(rc['reclaimed'])} (predicted {human(rc['predicted'])})")
    pl = getattr(rep, "placement", None)
    if pl and pl.get("after"):
        short = fill.short_names(list(pl["before"]))
        out.append("placement of what was rewritten (measured), before -> after: " + ", ".join(
            f"{short[n]} {100 * b:.0f}% -> {100 * pl['after'].get(n, 0):.0f}%" for n, b in pl["before"].items()))
    if rep.skipped:
        out.append("skipped: " + ", ".join(f"{n} {k}" for k, n in rep.skipped.items()))
    return lines(out)


def runs_text(runs: list[dict]) -> str:
    if not runs:
        return lines("no runs recorded yet")
    rows: list[tuple[str, ...]] = [("ID", "KIND", "POOL/JOB", "STARTED UTC", "FILES", "BYTES", "SPREAD", "OUTCOME")]
    for r in runs:
        d = r["details"]
        spread = f"{d['spread_before']:.1f}->{d['spread_after']:.1f}" if "spread_before" in d else ""
        outcome = r["outcome"] + (f" ({_short(r['error'])})" if r.get("error") and r["outcome"] != Outcome.OK else "")
        if d.get("parts", 1) > 1:
            outcome += f" (in {d['parts']} parts: {_short(d.get('continued', 'continued'))})"
        rows.append((str(r["id"]), r["kind"], r["job"] or r["pool"] or "", r["started"][5:16].replace("T", " "),
                     _figure(d.get("files"), str), _figure(d.get("bytes"), human), spread, outcome))
    out = table(rows, right={0, 4, 5})
    for r in runs:
        if r["details"].get("read"):
            out += [f"run {r['id']}: {line}" for line in reads_text(r["details"]["read"]).splitlines()]
    return lines(out)


def _short(text: str, width: int = 60) -> str:
    """A run's error in a row of `rebal runs`: its first line, cut to ``width`` (the whole of it is
    in `rebal runs --json`)."""
    one = " ".join(str(text).split())
    return one if len(one) <= width else one[:width - 3].rstrip() + "..."


def reads_text(read: dict) -> str:
    """A rebalance's readings before and after (--measure-read): each vdev's share of the bytes the
    disks read, the throughput, and how much came from the disks rather than the ARC."""
    out = []
    for when in ("before", "after"):
        m = read.get(when)
        if not m:
            continue
        shares = ", ".join(f"{v['name']} {100 * v['share_bytes']:.0f}%" for v in m["vdevs"])
        out.append(f"reads {when}: {shares}; {human(m['throughput_bytes_per_second'])}/s, "
                   f"{100 * m['from_disk']:.0f}% from the disks")
    return "\n".join(out) + "\n"


def _figure(v: object, fmt: Callable[[float], str]) -> str:
    """A run's count as its kind records it: a number, a pair (verify: the source's and the
    backup's), or nothing."""
    if isinstance(v, bool) or v is None:
        return ""
    if isinstance(v, (int, float)):
        return fmt(v)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return "/".join(fmt(x) for x in v)
    return ""
