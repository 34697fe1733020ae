"""`rebal refresh`: rewrite the data written under properties its dataset no longer has.

The plan (oldblocks.py) says which files hold old blocks, by property. A refresh rewrites exactly those
files through the rebalance's machinery (journal, limits, snapshot budget, replication awareness,
resume), by the method that can apply the change: `zfs rewrite` where the pool has it and only
compression, checksum, copies or dedup differ (in place, same inode); a copy where the block size must
change (zfs rewrite keeps a multi-block file's block size) or where there is no `zfs rewrite`. Then it
measures again, the same way, and reports what is still old, with `used` and `compressratio` of
each dataset before and after.
"""

from __future__ import annotations

import sqlite3

import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .oldblocks import REWRITE_APPLIES, FileStale, Measured, measure, predict_compression, total
from .outcome import Outcome
from .units import parse_size

if TYPE_CHECKING:
    from .config import Config
    from .rebalance.runstate import Events
    from .rebalance.scan import Filters
    from .zfs.host import ZfsHost

REASONS = (*REWRITE_APPLIES, "recordsize")
TOP_DIRS = 20


def summary(m: Measured) -> dict:
    """Per dataset, per directory and per property: the bytes in old blocks (estimated totals where
    sampled, with a 95% half-width), and by which method a refresh would rewrite them."""
    datasets = []
    for ds, w in sorted(m.wants.items()):
        def mine(f: FileStale, ds: str = ds) -> bool:
            return f.dataset == ds

        old = {}
        for r in REASONS:  # (each lambda is called at once: r and mine are this round's)
            est, half = total(m, lambda f: f.by_reason.get(r, 0) if mine(f) else 0)
            if est:
                old[r] = {"bytes": int(est), "ci95": int(half)}
        alloc, _ = total(m, lambda f: f.alloc if mine(f) else 0)
        stale, half = total(m, lambda f: f.stale if mine(f) else 0)
        datasets.append({"dataset": ds, "properties": w.values, "bytes": int(alloc), "old_bytes": int(stale),
                         "old_ci95": int(half), "by_property": old})
    dirs: dict[str, Counter] = {}
    for _o, f, _w in m.sampled:
        if f.stale:
            d = dirs.setdefault(os.fsdecode(os.path.dirname(f.path)), Counter())
            for r, n in f.by_reason.items():
                d[r] += n
            d["files"] += 1
    top = sorted(dirs.items(), key=lambda kv: -sum(v for k, v in kv[1].items() if k != "files"))[:TOP_DIRS]
    methods = {k: int(total(m, lambda f: f.stale if f.stale and f.method == k else 0)[0]) for k in ("rewrite", "copy")}
    sizes = {}
    for ds, w in m.wants.items():
        got = Counter(len(f.blocks) and max(b.lsize for b, _ in f.blocks) for _o, f, _w in m.sampled
                      if f.dataset == ds and f.by_reason.get("recordsize"))
        if got:
            sizes[ds] = {"recordsize": w.recordsize, "files_measured": sum(got.values()),
                         "block_sizes_now": {str(k): v for k, v in sorted(got.items())}}
    return {"pool": m.pool, "paths": m.paths, "files": m.files, "measured_files": len(m.sampled),
            "datasets": datasets, "dirs": [{"path": p, "files": c["files"], "by_property": {k: v for k, v in c.items() if k != "files"}}
                                          for p, c in top],
            "methods": methods, "recordsize": sizes, "seconds": round(m.seconds, 2), "notes": list(m.notes)}


HARDLINKED = ("hardlinked: a copy of one name would break the link ([rebalance] hardlinks = true copies "
              "each link group whose every name lies in the paths)")


def left_alone(m: Measured, hardlinks: bool, in_place: bool) -> list[dict]:
    """The measured old files a refresh leaves as they are, and why: a hardlinked file that needs a
    copy (a new block size, or no zfs rewrite here) while ``hardlinks`` ([rebalance] hardlinks) is off.
    zfs rewrite works in place and keeps every link."""
    if hardlinks:
        return []
    return [{"path": os.fsdecode(o.path), "links": o.nlink, "old_bytes": f.stale, "why": HARDLINKED}
            for o, f, _w in m.sampled
            if f.stale and o.nlink > 1 and (f.method == "copy" or not in_place)]


def plan(paths: list[str], host: ZfsHost, *, sample: int = 2000, seed: int = 0, hardlinks: bool = False,
         method: str | None = None) -> dict:
    m = measure(paths, host, sample=sample, seed=seed)
    out = summary(m)
    out["compression"] = predict_compression(m, seed)
    out["left"] = left_alone(m, hardlinks, _in_place(host, method))
    return out


def _in_place(host: ZfsHost, method: str | None) -> bool:
    """Whether the files zfs rewrite can refresh are refreshed in place (else by copy)."""
    return method != "copy" and host.rewrite_support()[0]


def usage(datasets: list[str], host: ZfsHost) -> dict[str, dict]:
    """`used` and `compressratio` of each dataset, and `logicalused` where the ZFS has it (not zfs-fuse)."""
    out = {}
    for ds in datasets:
        v = host.properties(ds, ["used", "compressratio"]) | host.properties(ds, ["logicalused"], check=False)
        out[ds] = {"used": int(v.get("used", 0) or 0), "compressratio": v.get("compressratio", "")} | (
            {"logicalused": int(v["logicalused"])} if v.get("logicalused", "").isdigit() else {})
    return out


def passes(m: Measured) -> dict[str, list[tuple]]:
    """The old files by the method that refreshes them: (path, st_dev, st_ino) as they are now (a file
    replaced since it was measured is left for the next run)."""
    out: dict[str, list[tuple]] = {"rewrite": [], "copy": []}
    for o, f, _w in m.sampled:
        if not f.stale:
            continue
        try:
            st = os.lstat(o.path)
        except OSError:
            continue
        if st.st_ino == o.ino:
            out[f.method].append((o.path, st.st_dev, st.st_ino))
    return out


def leave_out(m: Measured, filters: Filters) -> Measured:
    """The measurement without the files the excludes leave alone (a glob on a directory: all below it)."""
    if not filters.exclude:
        return m
    roots = [os.fsencode(p).rstrip(b"/") for p in m.paths]

    def out(path: bytes) -> bool:
        root = next((r for r in roots if path.startswith(r + b"/")), None)
        if root is None:
            return False
        parts = path[len(root) + 1:].split(b"/")
        return any(filters.excluded(b"/".join(parts[:i + 1])) for i in range(len(parts)))

    kept = [row for row in m.sampled if not out(row[0].path)]
    m.files -= len(m.sampled) - len(kept)
    m.sampled = kept
    return m


def run_passes(cfg: Config, paths: list[str], host: ZfsHost, conn: sqlite3.Connection, todo: dict[str, list[tuple]], given: dict, *, purpose: str,
               whys: dict[str, str], events: Events | None = None, stop: threading.Event | None = None,
               dry_run: bool = False) -> list[dict]:
    """Rewrite exactly the files of ``todo`` (method -> (path, st_dev, st_ino)) through the rebalance's
    machinery (journal, limits, snapshot budget, resume): one run per method, ``--max-bytes`` shared;
    a dry run plans each pass only. What each pass did, in order."""
    from .rebalance import engine
    from .rebalance.options import options_from
    from .rebalance.prepare import checked, prepare

    passes: list[dict] = []
    budget = parse_size(given["max_bytes"]) if given.get("max_bytes") else None
    for method, files in todo.items():
        if not files or (stop is not None and stop.is_set()):
            continue
        if budget is not None and budget <= 0:
            passes.append({"method": method, "files": len(files), "outcome": Outcome.INCOMPLETE,
                           "reason": "--max-bytes reached before this pass", "rewritten_files": 0,
                           "rewritten_bytes": 0, "why": "left for the next run", "run_id": None})
            continue
        this = given | {"method": "copy" if method == "copy" else given.get("method")}
        if budget is not None:
            this["max_bytes"] = str(budget)  # (the run's limit, shared by both passes)
        opts = options_from(cfg, paths, **this, rewrite_all=True, listing=not dry_run)
        opts = replace(opts, purpose=purpose, filters=replace(opts.filters, only=frozenset((d, i) for _p, d, i in files)))
        prep = prepare(opts, host, conn)
        one = {"method": prep.method, "files": len(files), "why": whys[method], "planned_files": prep.plan.files,
               "planned_bytes": prep.plan.bytes}
        if dry_run:
            passes.append(one | {"notes": prep.notes, "warnings": prep.warnings})
            continue
        prep = checked(prep, opts)
        rep = engine.execute(prep, opts, host, conn, cfg.state_db, events, stop)
        passes.append(one | {"run_id": rep.run_id, "outcome": rep.outcome, "reason": rep.reason,
                             "rewritten_files": rep.files, "rewritten_bytes": rep.bytes, "skipped": dict(rep.skipped or {})})
        if budget is not None:
            budget -= rep.bytes
    return passes


def refresh(cfg: Config, paths: list[str], host: ZfsHost, conn: sqlite3.Connection, *, given: dict,
            events: Events | None = None, stop: threading.Event | None = None, dry_run: bool = False,
            progress: Callable[[int, int], None] | None = None) -> dict:
    """Measure every file, rewrite the old ones (rewrite pass, then copy pass), measure again."""
    from .rebalance.options import options_from

    filters = options_from(cfg, paths, **given).filters  # (the run's excludes: out of the count as of the run)
    before_m = leave_out(measure(paths, host, sample=None, progress=progress), filters)
    todo = passes(before_m)
    datasets = sorted(before_m.wants)
    left = left_alone(before_m, cfg.rebalance.hardlinks, _in_place(host, given.get("method")))
    out: dict[str, Any] = {"pool": before_m.pool, "paths": before_m.paths, "files": before_m.files, "dry_run": dry_run,
           "before": summary(before_m), "passes": [], "left": left}
    if left:  # not rewritten by any pass (the scan skips them): said, not left to look like success
        gone = {os.fsencode(x["path"]) for x in left}
        todo = {k: [t for t in v if t[0] not in gone] for k, v in todo.items()}
    if not any(todo.values()):
        out["outcome"] = Outcome.OK
        out["reason"] = (f"nothing to rewrite: {len(left)} old file(s) left as they are ({HARDLINKED})" if left
                         else "nothing was written under old properties")
        return out
    used_before = usage(datasets, host)
    whys = {"copy": "block size", "rewrite": "compression, checksum, copies, dedup or an old raidz ratio"}
    out["passes"] = run_passes(cfg, paths, host, conn, todo, given, purpose="refresh", whys=whys,
                               events=events, stop=stop, dry_run=dry_run)
    if stop is not None and stop.is_set():  # not measured again: asked to stop
        out["outcome"], out["reason"] = Outcome.INTERRUPTED, "stopped by a signal; the next refresh continues"
        return out
    if dry_run:
        out["outcome"] = Outcome.OK
        out["reason"] = f"would rewrite {sum(len(f) for f in todo.values())} file(s) in {len(out['passes'])} pass(es)"
        return out
    after_m = leave_out(measure(paths, host, sample=None), filters)
    used_after = usage(datasets, host)
    after_summary = summary(after_m)
    eligible = sum(d["old_bytes"] for d in out["before"]["datasets"])
    still = sum(d["old_bytes"] for d in after_summary["datasets"])
    out["after"] = after_summary
    out["usage"] = {ds: {"before": used_before[ds], "after": used_after[ds],
                         "saved_bytes": used_before[ds]["used"] - used_after[ds]["used"]} for ds in datasets}
    out["old_bytes_before"], out["old_bytes_after"] = eligible, still
    out["old_share_after"] = round(still / eligible, 4) if eligible else 0.0
    outcomes = [p.get("outcome") for p in out["passes"]]
    out["outcome"] = Outcome.OK if all(o == Outcome.OK for o in outcomes) else next(o for o in outcomes if o != Outcome.OK)
    out["reason"] = next((p.get("reason") for p in out["passes"] if p.get("outcome") != Outcome.OK), None) or (
        f"{sum(p.get('rewritten_files', 0) for p in out['passes'])} file(s) rewritten; "
        f"{still} bytes still under old properties"
        + (f" ({len(left)} hardlinked file(s) left as they are: [rebalance] hardlinks = false)" if left else ""))
    return out
