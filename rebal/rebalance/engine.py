"""The rebalance run: rewrite directory by directory, re-measuring after each, until the CAP spread
is under the target or a limit is reached (`prepare.py` resolves, scans and plans before it).

Library code: it never prints. What happens is told through an `Events` object; problems a user can
act on are `RebalError`s.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, closing, nullcontext
from collections.abc import Callable, Generator
from itertools import takewhile
from typing import TYPE_CHECKING

from .. import state
from ..errors import RebalError
from ..locks import FileLock
from ..outcome import Outcome
from ..recorded import Run as Record
from ..recorded import recorded
from ..zfs.tunable import Parameter
from . import journal, steer
from .files import DEFERRED
from .inplace_pass import Batches, batches
from .planner import (
    DirEntry,
    order_dirs,
)
from .options import Options
from .prepare import Prepared
from .runstate import DirReport, Events, LogEvents, Report, Run

if TYPE_CHECKING:
    from ..zfs.host import ZfsHost
    from ..zfs.model import Pool

# -- execute ------------------------------------------------------------------------------------


class PoolLock(FileLock):
    """One rebalance per pool at a time."""

    def __init__(self, state_db: str, pool: str) -> None:
        super().__init__(state_db, f"rebalance-{pool}", f"rebalance of pool {pool}")


def execute(prep: Prepared, opts: Options, host: ZfsHost, conn: sqlite3.Connection, state_db: str, events: Events | None = None,
            stop: threading.Event | None = None, *, stopped_by: Callable[[], str | None] | None = None,
            reading: Callable[[], dict] | None = None) -> Report:
    """The run, recorded (one row, continued when ``prep`` resumes one). ``stopped_by``: why the
    caller stopped the run (a signal), asked as it ends; ``reading``: the read measurement that the
    record keeps beside it, taken after the run."""
    events = events or LogEvents()
    stop = stop or threading.Event()
    from ..locks import Together

    jobs = [r["job"] for r in (prep.costs or {}).get("replication", [])]  # replicating these targets
    with PoolLock(state_db, prep.pool.name), Together(state_db, jobs, f"rebalance of pool {prep.pool.name}",
                                                      stop=stop, on_wait=events.note):
        recovered = _recover(conn, prep, events)
        earlier = _earlier(conn, prep, events)
        with recorded(conn, "rebalance", pool=prep.pool.name, key=prep.key, resume=prep.resume_run) as rec:
            assert rec.id is not None
            r = Run(prep, opts, host, conn, events, stop)
            _run(r, rec, recovered, earlier, stopped_by, reading)
        return r.report


def _run(r: Run, rec: Record, recovered: journal.Recovery, earlier: dict | None, stopped_by: Callable[[], str | None] | None,
         reading: Callable[[], dict] | None) -> None:
    prep, opts, host, conn, events, stop, run_id = r.prep, r.opts, r.host, r.conn, r.events, r.stop, rec.id
    assert run_id is not None
    held: steer.Held | None = None
    r.report = Report(run_id, Outcome.FAILED, "", spread_before=prep.pool.spread, predicted_after=prep.plan.spread_after,
                      scan_seconds=prep.scan_seconds)
    avail_ds = prep.targets[0].dataset
    if prep.reclaim:
        host.settle(prep.pool.name)
        r.report.reclaim = {"available_before": _available(host, avail_ds),
                            "predicted": prep.reclaim["reclaim_bytes"]}
    r.report.recovered = recovered
    t0 = time.monotonic()
    timer = None
    if opts.until is not None:
        def time_up() -> None:
            r.stop_reason = r.stop_reason or "the end of the time window (--until) was reached"
            stop.set()

        timer = threading.Timer(max(0.0, opts.until - time.time()), time_up)
        timer.daemon = True
        timer.start()
    old_sigio = None
    if threading.current_thread() is threading.main_thread():
        old_sigio = signal.signal(signal.SIGIO, signal.SIG_IGN)  # lease breaks must not kill us
    try:
        held = _steer(conn, prep, run_id, events)
        r.report.steered = None if held is None or held.record is None else held.record["set"]
        if held is not None:
            _steering_ends(r, held, prep, events)
        r.report.predicted_after = prep.plan.spread_after  # the unsteered plan's where steering was refused
        ranked = prep.plan.ranked if prep.plan.measured else order_dirs(prep.scan.dirs)  # measured: fullest first
        dirs = [d for d in ranked if d.path not in prep.done_dirs]
        events.start(prep, sum(d.files for d in dirs), sum(d.bytes for d in dirs))
        r.report.outcome, r.report.reason = _loop(r, dirs)
        failures = {k: n for k, n in r.report.skipped.items() if k not in DEFERRED}
        if r.report.files == 0 and failures and r.report.outcome != Outcome.INTERRUPTED:
            # nothing could be rewritten (a read-only sandbox, permissions, every copy failing): not "ok"
            r.report.outcome, r.report.reason = Outcome.FAILED, "no file could be rewritten: " + ", ".join(
                f"{n} {k}" for k, n in failures.items()) + (f" ({r.report.reason})" if r.report.reason else "")
        elif ((r.report.outcome == Outcome.INCOMPLETE or (r.report.outcome == Outcome.OK and r.all))
              and any(r.report.skipped.get(k) for k in DEFERRED)):
            r.report.outcome, r.report.reason = Outcome.STOPPED, _deferred_reason(r)
        if reading is not None:
            try:
                r.report.read = reading()
            except RebalError as e:  # the run's outcome stands
                events.note(f"the read measurement after the run failed: {e}")
    except BaseException as e:
        r.report.outcome, r.report.reason = Outcome.FAILED, f"{type(e).__name__}: {e}"
        raise
    finally:
        if held is not None and (problem := held.give_back()):
            events.note(problem)
        if timer:
            timer.cancel()
        if old_sigio is not None:
            signal.signal(signal.SIGIO, old_sigio)
        if stopped_by is not None and (why := stopped_by()):
            r.report.outcome, r.report.reason = Outcome.INTERRUPTED, why
        _finish(r, rec, earlier, avail_ds, t0)


def _steer(conn: sqlite3.Connection, prep: Prepared, run_id: int, events: Events) -> steer.Held | None:
    """The allocator steered for the run where the plan says so (held: given back when it ends);
    a value a dead run left behind put back first."""
    param = Parameter(steer.NAME)
    said = steer.left_behind(conn, param)
    if said:
        events.note(said)
    if prep.steer is None or prep.steer.threshold is None:
        return None
    held = steer.Held(conn, param)
    why = held.take(prep.steer.threshold, run_id, prep.pool.name)
    if why:
        events.note(why)
        if prep.unsteered is not None:  # the run's model is the allocator as it is, then
            prep.plan = prep.unsteered
        return None
    return held


def _steering_ends(r: Run, held: steer.Held, prep: Prepared, events: Events) -> None:
    """While steered the run looks again each time it has rewritten half of what the vdevs taking the
    writes can still take (ZFS sees the threshold only when a transaction group ends: a directory
    rewritten at once could carry them past the mean, and what is rewritten after that lands on
    the fuller vdevs and cannot bring it back); once they are at it, the admin's value goes back
    and the rest of the run is placed as ZFS would."""
    if held.record is None:  # given back already: nothing to end
        return
    threshold = held.record["set"]
    names = steer.receiving(prep.pool, threshold)
    r.steering = lambda: steer.room(threshold, names, r.last_pool or prep.pool)

    def told(pool: Pool) -> None:
        if held.record is not None and steer.steered_enough(threshold, names, pool):
            r.steering = None
            r.on_measured = None  # once: a value that could not be put back is tried again at the end only
            problem = held.give_back()
            events.note(problem or f"steering done at spread {pool.spread:.1f} (the emptier vdevs are at it): "
                                   f"{steer.NAME} is the admin's again; the rest is placed as ZFS would")
    r.on_measured = told


def _recover(conn: sqlite3.Connection, prep: Prepared, events: Events) -> journal.Recovery:
    """What an earlier crash left: the journal's unfinished files put right, the temp names no
    journal names removed where that is provably safe, runs that died marked so."""
    recovered = journal.recover(conn, prep.pool.name)
    if recovered.rows:
        events.note(f"recovered from an earlier crash: {recovered.rows} unfinished file(s), "
                    f"{len(recovered.removed)} temp name(s) removed")
    for path in recovered.left:
        events.note(f"left alone (not recognised as rebal's): {path}")
    if prep.scan.skips.temps:  # what no journal names (after recover: it knew the rest)
        from .leftovers import clean

        cleaned = clean(prep.scan.skips.temps)
        if cleaned.removed:
            events.note(f"removed {len(cleaned.removed)} leftover rebal temp name(s) that no journal named "
                        f"(e.g. {cleaned.removed[0]})")
        for path, why in cleaned.left:
            events.note(f"left alone: {path} ({why}); remove it by hand once you know what it is")
    state.mark_dead_runs(conn, "rebalance", pool=prep.pool.name, keep=prep.resume_run)
    return recovered


def _earlier(conn: sqlite3.Connection, prep: Prepared, events: Events) -> dict | None:
    """When the run continues an earlier one: what its earlier parts did, and how they ended."""
    earlier = None
    if prep.resume_run is not None:
        run_id = prep.resume_run
        row = state.run_row(conn, run_id)
        files, nbytes = journal.done_totals(conn, run_id)
        old = json.loads(row["details"] or "{}") if row else {}
        ended, why = ((Outcome.INTERRUPTED, state.DIED) if row is None or row["outcome"] is None
                      else (row["outcome"], row["error"]))
        earlier = {"parts": old.get("parts", 1), "files": files, "bytes": nbytes, "ended": ended, "why": why}
        events.note(f"continuing run {run_id}: {len(prep.done_dirs)} directories already done")
    return earlier


def _finish(r: Run, rec: Record, earlier: dict | None, avail_ds: str, t0: float) -> None:
    """The run's last figures (the spread settled, the reclaimed space, where the rewritten data went)
    and its record, however it ended."""
    prep, opts, host = r.prep, r.opts, r.host
    r.report.seconds = time.monotonic() - t0
    r.report.growth = r.growth
    if r.growth:  # the snapshots that hold the old copies: the space and balance come when they go
        r.report.waiting_on = [n for (n, c, _u), b in zip(prep.snapshots, prep.scan.pinned_by) if b]
    try:
        if r.settled_at is not None and r.settled_at[0] == r.moved:  # just measured, settled (the target)
            r.flush_done()
            r.report.spread_after = r.settled_at[1]
        else:
            r.report.spread_after = r.measure(settle=True)
        if opts.rewrite_all and r.report.outcome == Outcome.OK and not prep.reclaim_only:
            r.report.reason += f"; the spread is now {r.report.spread_after:.1f}"
        elif r.report.outcome == Outcome.OK and r.report.reason == _goal(r):  # said with the settled figure
            r.spread_now = r.report.spread_after
            r.report.reason = _goal(r)
    except RebalError:
        r.report.spread_after = r.spread_now
    r.report.seconds = time.monotonic() - t0  # with the last measurement, which waits for the frees
    if prep.plan.measured and r.report.files:
        from .measure import rewritten_placement

        r.report.placement = rewritten_placement(prep.plan, r.report.done_dirs, host, ids=prep.vdev_ids)
    if r.report.reclaim is not None:
        after = _available(host, avail_ds)
        r.report.reclaim |= {"available_after": after,
                             "reclaimed": after - r.report.reclaim["available_before"]}
    details = r.report.as_dict() | {"method": prep.method, "jobs": prep.jobs}
    if earlier is not None:  # the whole run: every part's files and bytes, and that it was continued
        details |= {"files": r.report.files + earlier["files"], "bytes": r.report.bytes + earlier["bytes"],
                    "dirs": r.report.dirs + len(prep.done_dirs), "parts": earlier["parts"] + 1,
                    "continued": f"continued after the part before ended {earlier['ended']}"
                                 + (f": {earlier['why']}" if earlier["why"] else ""),
                    "this_part": {"files": r.report.files, "bytes": r.report.bytes, "dirs": r.report.dirs}}
    rec.outcome, rec.error, rec.details = (r.report.outcome, r.report.reason if r.report.outcome == Outcome.FAILED else None,
                                           details)


def _available(host: ZfsHost, dataset: str) -> int:
    v = host.get(dataset, ["available"]).get("available", "0")
    return int(v) if v.isdigit() else 0


def _step_done(r: Run, rep: DirReport) -> bool:
    """After a directory (or the hardlink groups): measure, tally, report; True at the target."""
    reached = (rep.cut or r.target_reached()) and not r.all
    _tally_step(r, rep)
    return reached


def _tally_step(r: Run, rep: DirReport) -> None:
    rep.spread = r.spread_now
    for k, n in rep.skipped.items():
        r.report.skipped[k] = r.report.skipped.get(k, 0) + n
    r.events.dir_done(rep)


def _loop(r: Run, dirs: list[DirEntry]) -> tuple[Outcome, str]:
    prep, opts = r.prep, r.opts
    if r.spread_now <= opts.target_spread and not r.all:
        return Outcome.OK, f"spread {r.spread_now:.1f} is within the target {opts.target_spread:g}"
    roots = {t.root: os.lstat(t.root).st_dev for t in prep.targets}

    def where(d: DirEntry) -> tuple[bytes, int]:
        root = next(rt for rt in sorted(roots, key=len, reverse=True) if d.path == rt or d.path.startswith(rt.rstrip(b"/") + b"/"))
        return root, roots[root]

    pools: tuple[ThreadPoolExecutor, AbstractContextManager[ThreadPoolExecutor | None], ThreadPoolExecutor]
    if prep.method == "rewrite":  # in place: no swaps
        pools = (ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-rewrite"), nullcontext(None),
                 ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-scan"))
    else:
        pools = (ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-copy"),
                 ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-swap"),
                 ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-scan"))
    with pools[0] as pool, pools[1] as r.swap_pool, pools[2] as scanner:
        if prep.method == "rewrite":  # in place, lanes of processes fed parts of the scan (inplace_pass.py)
            steps: Batches | Generator[tuple[DirEntry, DirReport], None, None] = batches(r, pool, scanner, dirs, where)
        else:  # copy-and-rename, directory by directory
            from .copy_pass import copy_dir

            steps = ((d, copy_dir(r, pool, d, *where(d))) for d in takewhile(lambda _d: not r.limit_hit(), dirs))
        def record(d: DirEntry, rep: DirReport) -> None:
            if prep.method == "rewrite":  # in place: a lost "done" only means the directory is done again
                finished = not rep.deferred
                r.pending_done.append((d.path, rep.files, rep.bytes, finished))
            else:
                finished = not r.stop.is_set() and not rep.deferred and not rep.cut
                journal.end_dir(r.conn, r.report.run_id, d.path, rep.files, rep.bytes, finished)
            r.report.dirs += finished
            r.report.dirs_partial += not finished and d.path != b"(hardlink groups)"
            if finished:
                r.report.done_dirs.append(d.path)

        with closing(steps):
            for d, rep in steps:
                record(d, rep)
                if _step_done(r, rep):
                    if isinstance(steps, Batches):  # in place: the directories the lanes answered meanwhile
                        for d2, rep2 in steps.rest():
                            record(d2, rep2)
                            _tally_step(r, rep2)
                    return Outcome.OK, _goal(r)
    if prep.scan.groups and not r.limit_hit():
        from .groups import copy_groups

        if _step_done(r, copy_groups(r, DirReport(b"(hardlink groups)"))):
            return Outcome.OK, _goal(r)
    why = r.limit_hit()
    if why and r.risen:  # nothing left would bring it down: the next run plans afresh
        return Outcome.INCOMPLETE, why
    if why:
        return (Outcome.INTERRUPTED if why == Outcome.INTERRUPTED else Outcome.STOPPED), why
    if prep.reclaim_only:
        return Outcome.OK, "every file stored at the old data:parity ratio was rewritten"
    if opts.rewrite_all:
        return Outcome.OK, "every eligible file was rewritten (--all)"  # the spread after it: execute adds it
    return Outcome.INCOMPLETE, (f"every eligible directory was rewritten; the spread is {r.spread_now:.1f}, "
                          f"above the target {opts.target_spread:g}")


def _deferred_reason(r: Run) -> str:
    left = ", ".join(f"{r.report.skipped[k]} file(s) {k}" for k in DEFERRED if r.report.skipped.get(k))
    return f"{left}: left for a later run (their directories are not marked done)"


def _goal(r: Run) -> str:
    if r.report.spread_when_freed is not None:
        return (f"the spread will be about {r.report.spread_when_freed:.1f} (under the target {r.opts.target_spread:g}) "
                f"once the snapshots holding the old copies go; {r.spread_now:.1f} until then")
    if r.spread_now <= r.opts.target_spread:
        return f"spread {r.spread_now:.1f} is under the target {r.opts.target_spread:g}"
    return (f"spread {r.spread_now:.1f}: the target {r.opts.target_spread:g} was reached before the last frees "
            "settled; the next run goes on from here")
