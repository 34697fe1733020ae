"""The rebalance run: rewrite directory by directory, re-measuring after each, until the CAP spread
is under the target or a limit is reached (`prepare.py` resolves, scans and plans before it).

Library code: it never prints. What happens is told through an `Events` object; problems a user can
act on are `RebalError`s.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, nullcontext
from dataclasses import dataclass, field
from itertools import takewhile

from .. import state
from ..errors import RebalError
from ..locks import FileLock
from ..throttle import Throttle
from ..units import human
from . import journal
from .files import DEFERRED, FileRef, Result
from .inplace_pass import batches
from .planner import (
    DirEntry,
    bytes_to_target,
    order_dirs,
    simulate,
    simulate_dirs,
    spread,
)
from .prepare import (  # noqa: F401
    Options,
    Prepared,
    RefusedError,
    Target,
    _avail,
    check_pinned,
    check_writable,
    default_jobs,
    fills,
    options_from,
    prepare,
    resolve_targets,
    run_key,
    until_epoch,
)

SETTLE_EVERY = 10.0  # seconds: settle at least this often between directories
MEASURE_BYTES = 64 << 20  # re-measure the pool after at least this much was rewritten (or SETTLE_EVERY)


@dataclass
class DirReport:
    path: bytes
    files: int = 0
    bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    spread: float | None = None
    deferred: int = 0  # files left for a later run by this run's limits: the directory is not done


@dataclass
class Report:
    run_id: int
    outcome: str  # ok, incomplete, stopped, interrupted, failed
    reason: str
    files: int = 0
    bytes: int = 0
    dirs: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    spread_before: float = 0.0
    spread_after: float = 0.0
    predicted_after: float = 0.0
    seconds: float = 0.0
    recovered: journal.Recovery | None = None
    reclaim: dict | None = None  # after a RAIDZ expansion: available before/after, reclaimed, predicted
    growth: int = 0  # bytes rewritten that snapshots still hold: the pool's growth until they go
    waiting_on: list[str] = field(default_factory=list)  # those snapshots
    spread_when_freed: float | None = None  # predicted, once they go
    placement: dict | None = None  # measured: where the rewritten directories' data was, and is now
    done_dirs: list[bytes] = field(default_factory=list)

    def as_dict(self) -> dict:
        return ({"reclaim": self.reclaim} if self.reclaim else {}) | (
            {"placement": self.placement} if self.placement else {}) | (
            {"growth": self.growth, "waiting_on": self.waiting_on, "spread_when_freed": self.spread_when_freed}
            if self.growth else {}) | {
            "run_id": self.run_id,
            "outcome": self.outcome,
            "reason": self.reason,
            "files": self.files,
            "bytes": self.bytes,
            "dirs": self.dirs,
            "skipped": self.skipped,
            "spread_before": round(self.spread_before, 2),
            "spread_after": round(self.spread_after, 2),
            "predicted_after": round(self.predicted_after, 2),
            "seconds": round(self.seconds, 2),
        }


class Events:
    """Hooks for progress; the CLI renders them. Here (a scheduled run) notes go to the log."""

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None: ...
    def file_done(self, ref: FileRef, result: Result) -> None: ...
    def dir_done(self, report: DirReport) -> None: ...
    def measured(self, spread: float) -> None: ...
    def progress(self, files: int, nbytes: int) -> None: ...  # rewrite: so far, while parts run

    def note(self, text: str) -> None:
        import logging

        logging.getLogger("rebal.job.rebalance").info("%s", text)


# -- execute ------------------------------------------------------------------------------------


class PoolLock(FileLock):
    """One rebalance per pool at a time."""

    def __init__(self, state_db: str, pool: str) -> None:
        super().__init__(state_db, f"rebalance-{pool}", f"rebalance of pool {pool}")


class _Run:
    def __init__(self, prep, opts, zpool, zfs, conn, events, stop):
        self.prep, self.opts, self.zpool, self.zfs, self.conn = prep, opts, zpool, zfs, conn
        self.events, self.stop = events, stop
        self.pool_name = prep.pool.name
        self.reserve = prep.pool.size * opts.reserve_percent / 100
        self.throttle = Throttle(opts.max_rate)
        self._copier = None
        self.swap_pool = None  # the copy pass's second pool of threads (barriers and swaps), while it runs
        self.report: Report
        self.stop_reason = ""
        self.last_settle = time.monotonic()
        self.spread_now = prep.pool.spread
        self.linked_seen: set[int] = set()  # hardlinked inodes already rewritten in place
        self.filters = prep.filters or opts.filters
        self.all = opts.rewrite_all or prep.reclaim_only  # every eligible file, whatever the spread
        # data last written before the newest snapshot is referenced by it: rewriting it grows the pool
        self.pinned_ns = int((prep.snapshots[-1][1] + 1) * 1e9) if prep.snapshots else None  # whole seconds
        self.growth = 0
        self.pending_size = 0  # bytes of the batches in flight (copies being made)
        self.pending_grow = 0  # of which pinned by a snapshot: growth not yet counted
        self.moved = 0  # bytes allocated to what was rewritten: what the model moves (sparse files are small)
        self.moved_at_measure = 0
        self.last_measure = time.monotonic()  # the plan's figures are a measurement
        self.settled_at: tuple[int, float] | None = None  # (bytes moved, spread) at the last settled measurement
        # measure the pool per batch of bytes, not per directory (a `zpool list` per small directory
        # was a good part of the per-file cost of a tree of small directories)
        self.measure_every = max(MEASURE_BYTES, prep.pool.size // 200)
        self.movable = sum(d.moves for d in prep.scan.dirs if d.path not in prep.done_dirs) if prep.scan else 0
        self.pending_done: list[tuple[bytes, int, int, bool]] = []  # rewrite: done markers not yet written

    def pinned(self, mtime_ns: int) -> bool:
        return self.pinned_ns is not None and mtime_ns < self.pinned_ns

    def over_budget(self, more: int) -> bool:
        """Would ``more`` bytes of pinned data take the pool's growth past --max-growth?"""
        if self.opts.max_growth is None or self.growth + more <= self.opts.max_growth:
            return False
        self.stop_reason = (f"--max-growth reached: the pool grew by about {human(self.growth)} "
                            "(rewritten data that snapshots still hold)")
        self.stop.set()
        return True

    @property
    def copier(self):
        """The copy pass's copier, made on first use: the rewrite path never needs it."""
        if self._copier is None:
            from .copier import Copier

            self._copier = Copier(self.opts.verify, self.stop, self.throttle)
        return self._copier

    # measuring

    def flush_done(self) -> None:
        if self.pending_done:
            journal.dirs_ended(self.conn, self.report.run_id, self.pending_done)
            self.pending_done = []

    def measure(self, settle: bool) -> float:
        self.flush_done()
        self.moved_at_measure, self.last_measure = self.moved, time.monotonic()
        if settle:
            pool = self.zpool.settled(self.pool_name)
            self.last_settle = time.monotonic()
            self.settled_at = (self.moved, pool.spread)
        else:
            [pool] = self.zpool.pools([self.pool_name])
        self.spread_now = pool.spread
        self.events.measured(pool.spread)
        return pool.spread

    def target_reached(self) -> bool:
        """Measure after a directory. Frees show late (ZFS frees blocks asynchronously), so the
        figures right after a directory make the spread look worse than it is: the pool is settled
        first whenever the raw figures, or the model given the bytes rewritten so far, say the
        target may be reached, and otherwise at most every SETTLE_EVERY seconds."""
        target = self.opts.target_spread
        if self.all:
            return False  # every file goes, whatever the spread: measured at the end
        if self.moved == self.moved_at_measure:
            return False  # nothing rewritten since the pool was last measured (the rest of a window's directories)
        if (self.moved - self.moved_at_measure < self.measure_every and not self.growth
                and time.monotonic() - self.last_measure < SETTLE_EVERY and not self._near(target)):
            return False
        if self.growth:  # old copies stay until their snapshots go: the model says when the goal holds then
            self.measure(settle=False)
            self.report.spread_when_freed = spread(simulate(fills(self.prep.pool), self.moved))
            return self.report.spread_when_freed <= target - max(0.3, 0.05 * target)
        plan = self.prep.plan
        if plan.measured:  # where the rewritten directories' data was, measured
            done = set(self.report.done_dirs)
            predicted = spread(simulate_dirs(fills(self.prep.pool), [d for d in plan.ranked if d.path in done],
                                             plan.pinned_fraction))
        else:
            predicted = spread(simulate(fills(self.prep.pool), self.moved, plan.pinned_fraction)) + self._offset()
        # stop a little under the target: figures rounded to 3 digits (old ZFS) and the last frees
        # landing must not put the spread back over it right after the run
        line = target - max(0.3, 0.05 * target)
        if predicted <= target or time.monotonic() - self.last_settle >= SETTLE_EVERY:
            return self.measure(settle=True) <= line  # (the raw figures first were a `zpool list` for nothing)
        if self.measure(settle=False) <= target:  # the model may be wrong: the raw figures say it is there
            return self.measure(settle=True) <= line
        return False

    def _near(self, target: float, more: int = 0, dirs: tuple = ()) -> bool:
        """Is the model's spread, given what was rewritten so far (and ``more`` bytes in ``dirs``
        about to be), near the target? Then measure."""
        plan = self.prep.plan
        if plan.measured:
            done = set(self.report.done_dirs).union(dirs)
            predicted = spread(simulate_dirs(fills(self.prep.pool), [d for d in plan.ranked if d.path in done],
                                             plan.pinned_fraction))
        else:
            predicted = spread(simulate(fills(self.prep.pool), self.moved + more, plan.pinned_fraction)) + self._offset()
        return predicted <= target + 1.0

    def _offset(self) -> float:
        """How far the pool's last settled spread lay above the model's (by bytes moved): the model
        is shifted by it from then on (the next settled measurement corrects it again)."""
        if self.settled_at is None:
            return 0.0
        at, measured = self.settled_at
        return measured - spread(simulate(fills(self.prep.pool), at, self.prep.plan.pinned_fraction))

    def bytes_to_go(self) -> int | None:
        """Bytes still to rewrite for the spread to reach the stop line (a little under the target),
        by the model shifted to the last settled measurement; None where it cannot say (placement
        measured per directory, snapshots holding old copies, or the line out of reach)."""
        plan = self.prep.plan
        if self.all or self.growth or plan.measured:
            return None
        target = self.opts.target_spread
        line = target - max(0.3, 0.05 * target) - self._offset()
        if line <= 0:
            return None
        need = bytes_to_target(fills(self.prep.pool), line, self.movable, plan.pinned_fraction)
        return None if need is None else max(0, need - self.moved)

    # limits

    def limit_hit(self) -> str:
        if self.stop.is_set():
            return self.stop_reason or "interrupted"
        if self.opts.max_bytes is not None and self.report.bytes >= self.opts.max_bytes:
            return f"--max-bytes reached ({human(self.report.bytes)} rewritten)"
        if self.opts.until is not None and time.time() >= self.opts.until:
            return "the end of the time window (--until) was reached"
        return ""

    # one directory, zfs rewrite


def execute(prep: Prepared, opts: Options, zpool, zfs, conn, state_db: str, events: Events | None = None,
            stop: threading.Event | None = None) -> Report:
    events = events or Events()
    stop = stop or threading.Event()
    from ..locks import Together

    jobs = [r["job"] for r in (prep.costs or {}).get("replication", [])]  # replicating these targets
    with PoolLock(state_db, prep.pool.name), Together(state_db, jobs, f"rebalance of pool {prep.pool.name}",
                                                      stop=stop, on_wait=events.note):
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
        if prep.resume_run is not None:
            run_id = prep.resume_run
            conn.execute("UPDATE runs SET outcome = NULL, ended = NULL WHERE id = ?", (run_id,))
            events.note(f"continuing run {run_id}: {len(prep.done_dirs)} directories already done")
        else:
            run_id = state.start_run(conn, "rebalance", pool=prep.pool.name, key=prep.key)
        r = _Run(prep, opts, zpool, zfs, conn, events, stop)
        r.report = Report(run_id, "failed", "", spread_before=prep.pool.spread, predicted_after=prep.plan.spread_after)
        avail_ds = prep.targets[0].dataset
        if prep.reclaim:
            zpool.settle(prep.pool.name)
            r.report.reclaim = {"available_before": _available(zfs, avail_ds),
                                "predicted": prep.reclaim["reclaim_bytes"]}
        r.report.recovered = recovered
        t0 = time.monotonic()
        timer = None
        if opts.until is not None:
            timer = threading.Timer(max(0.0, opts.until - time.time()), lambda: (
                setattr(r, "stop_reason", r.stop_reason or "the end of the time window (--until) was reached"),
                stop.set()))
            timer.daemon = True
            timer.start()
        old_sigio = None
        if threading.current_thread() is threading.main_thread():
            old_sigio = signal.signal(signal.SIGIO, signal.SIG_IGN)  # lease breaks must not kill us
        try:
            ranked = prep.plan.ranked if prep.plan.measured else order_dirs(prep.scan.dirs)  # measured: fullest first
            dirs = [d for d in ranked if d.path not in prep.done_dirs]
            events.start(prep, sum(d.files for d in dirs), sum(d.bytes for d in dirs))
            r.report.outcome, r.report.reason = _loop(r, dirs)
            failures = {k: n for k, n in r.report.skipped.items() if k not in DEFERRED}
            if r.report.files == 0 and failures and r.report.outcome != "interrupted":
                # nothing could be rewritten (a read-only sandbox, permissions, every copy failing): not "ok"
                r.report.outcome, r.report.reason = "failed", "no file could be rewritten: " + ", ".join(
                    f"{n} {k}" for k, n in failures.items()) + (f" ({r.report.reason})" if r.report.reason else "")
            elif ((r.report.outcome == "incomplete" or (r.report.outcome == "ok" and r.all))
                  and any(r.report.skipped.get(k) for k in DEFERRED)):
                r.report.outcome, r.report.reason = "stopped", _deferred_reason(r)
        except BaseException as e:
            r.report.outcome, r.report.reason = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            if timer:
                timer.cancel()
            if old_sigio is not None:
                signal.signal(signal.SIGIO, old_sigio)
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
                if opts.rewrite_all and r.report.outcome == "ok" and not prep.reclaim_only:
                    r.report.reason += f"; the spread is now {r.report.spread_after:.1f}"
            except RebalError:
                r.report.spread_after = r.spread_now
            if prep.plan.measured and r.report.files:
                from .measure import rewritten_placement

                r.report.placement = rewritten_placement(prep.plan, r.report.done_dirs, zpool, zfs)
            if r.report.reclaim is not None:
                after = _available(zfs, avail_ds)
                r.report.reclaim |= {"available_after": after,
                                     "reclaimed": after - r.report.reclaim["available_before"]}
            state.end_run(conn, run_id, r.report.outcome, error=r.report.reason if r.report.outcome == "failed" else None,
                          details=r.report.as_dict() | {"method": prep.method, "jobs": prep.jobs})
        return r.report


def _available(zfs, dataset: str) -> int:
    v = zfs.get(dataset, ["available"]).get("available", "0")
    return int(v) if v.isdigit() else 0


def _step_done(r: _Run, rep: DirReport) -> bool:
    """After a directory (or the hardlink groups): measure, tally, report; True at the target."""
    reached = r.target_reached() and not r.all
    _tally_step(r, rep)
    return reached


def _tally_step(r: _Run, rep: DirReport) -> None:
    rep.spread = r.spread_now
    for k, n in rep.skipped.items():
        r.report.skipped[k] = r.report.skipped.get(k, 0) + n
    r.events.dir_done(rep)


def _loop(r: _Run, dirs: list[DirEntry]) -> tuple[str, str]:
    prep, opts = r.prep, r.opts
    if r.spread_now <= opts.target_spread and not r.all:
        return "ok", f"spread {r.spread_now:.1f} is within the target {opts.target_spread:g}"
    roots = {t.root: os.lstat(t.root).st_dev for t in prep.targets}

    def where(d: DirEntry) -> tuple[bytes, int]:
        root = next(rt for rt in sorted(roots, key=len, reverse=True) if d.path == rt or d.path.startswith(rt.rstrip(b"/") + b"/"))
        return root, roots[root]

    if prep.method == "rewrite":  # in place: no swaps
        pools = (ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-rewrite"), nullcontext(None),
                 ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-scan"))
    else:
        pools = (ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-copy"),
                 ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-swap"),
                 ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-scan"))
    with pools[0] as pool, pools[1] as r.swap_pool, pools[2] as scanner:
        if prep.method == "rewrite":  # in place, lanes of processes fed parts of the scan (inplace_pass.py)
            steps = batches(r, pool, scanner, dirs, where)
        else:  # copy-and-rename, directory by directory
            from .copy_pass import copy_dir

            steps = ((d, copy_dir(r, pool, d, *where(d))) for d in takewhile(lambda _d: not r.limit_hit(), dirs))
        def record(d, rep) -> None:
            if prep.method == "rewrite":  # in place: a lost "done" only means the directory is done again
                finished = not rep.deferred
                r.pending_done.append((d.path, rep.files, rep.bytes, finished))
            else:
                finished = not r.stop.is_set() and not rep.deferred
                journal.end_dir(r.conn, r.report.run_id, d.path, rep.files, rep.bytes, finished)
            r.report.dirs += finished
            if finished:
                r.report.done_dirs.append(d.path)

        with closing(steps):
            for d, rep in steps:
                record(d, rep)
                if _step_done(r, rep):
                    if prep.method == "rewrite":  # the directories the lanes answered meanwhile
                        for d2, rep2 in steps.rest():
                            record(d2, rep2)
                            _tally_step(r, rep2)
                    return "ok", _goal(r)
    if prep.scan.groups and not r.limit_hit():
        from .groups import copy_groups

        if _step_done(r, copy_groups(r, DirReport(b"(hardlink groups)"))):
            return "ok", _goal(r)
    why = r.limit_hit()
    if why:
        return ("interrupted" if why == "interrupted" else "stopped"), why
    if prep.reclaim_only:
        return "ok", "every file stored at the old data:parity ratio was rewritten"
    if opts.rewrite_all:
        return "ok", "every eligible file was rewritten (--all)"  # the spread after it: execute adds it
    return "incomplete", (f"every eligible directory was rewritten; the spread is {r.spread_now:.1f}, "
                          f"above the target {opts.target_spread:g}")


def _deferred_reason(r: _Run) -> str:
    left = ", ".join(f"{r.report.skipped[k]} file(s) {k}" for k in DEFERRED if r.report.skipped.get(k))
    return f"{left}: left for a later run (their directories are not marked done)"


def _goal(r: _Run) -> str:
    if r.report.spread_when_freed is not None:
        return (f"the spread will be about {r.report.spread_when_freed:.1f} (under the target {r.opts.target_spread:g}) "
                f"once the snapshots holding the old copies go; {r.spread_now:.1f} until then")
    return f"spread {r.spread_now:.1f} is under the target {r.opts.target_spread:g}"
