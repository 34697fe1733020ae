"""A rebalance run's state and what it reports, shared by the engine's loop and its two passes
(`copy_pass`: copy-verify-rename, `inplace_pass`: `zfs rewrite`): the run's figures, limits and
budgets (`Run`), a directory's and the run's reports, and the events the CLI renders."""

from __future__ import annotations

import builtins
from collections.abc import Callable

import logging
from concurrent.futures import ThreadPoolExecutor
import sqlite3
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from ..errors import RebalError
from ..outcome import Outcome
from ..throttle import Throttle
from ..units import human
from ..zfs.model import Pool
from . import journal
from .files import FileRef, Result
from .planner import DirEntry, DirModel, bytes_to_target, simulate, simulate_dirs, spread
from .prepare import Prepared, fills

if TYPE_CHECKING:
    from ..zfs.host import ZfsHost
    from .options import Options

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
    cut: bool = False  # the target was reached inside it: its other files are left (it is not done)


@dataclass
class Report:
    run_id: int
    outcome: Outcome  # ok, incomplete, stopped, interrupted, failed
    reason: str
    files: int = 0
    bytes: int = 0
    dirs: int = 0  # directories finished
    dirs_partial: int = 0  # directories begun and left for the next run (the target reached in them, a stop)
    skipped: dict[str, int] = field(default_factory=dict)
    spread_before: float = 0.0
    spread_after: float = 0.0
    predicted_after: float = 0.0
    seconds: float = 0.0  # the run, from its start to the pool measured settled after it
    scan_seconds: float = 0.0  # the scan before it (prepare)
    recovered: journal.Recovery | None = None
    reclaim: dict | None = None  # after a RAIDZ expansion: available before/after, reclaimed, predicted
    growth: int = 0  # bytes rewritten that snapshots still hold: the pool's growth until they go
    waiting_on: list[str] = field(default_factory=list)  # those snapshots
    spread_when_freed: float | None = None  # predicted, once they go
    placement: dict | None = None  # measured: where the rewritten directories' data was, and is now
    done_dirs: list[builtins.bytes] = field(default_factory=list)
    steered: int | None = None  # the zfs_mg_noalloc_threshold the run held (None: not steered)
    read: dict | None = None  # `--measure-read`: each vdev's share of reading the tree, before and after

    def as_dict(self) -> dict:
        return ({"reclaim": self.reclaim} if self.reclaim else {}) | (
            {"placement": self.placement} if self.placement else {}) | (
            {"read": self.read} if self.read else {}) | (
            {"growth": self.growth, "waiting_on": self.waiting_on, "spread_when_freed": self.spread_when_freed}
            if self.growth else {}) | {
            "run_id": self.run_id,
            "outcome": self.outcome,
            "reason": self.reason,
            "files": self.files,
            "bytes": self.bytes,
            "dirs": self.dirs,
            "dirs_partial": self.dirs_partial,
            "skipped": self.skipped,
            "spread_before": round(self.spread_before, 2),
            "spread_after": round(self.spread_after, 2),
            "predicted_after": round(self.predicted_after, 2),
            "seconds": round(self.seconds, 2),
            "scan_seconds": round(self.scan_seconds, 2),
            "steered": self.steered,
        }


class Events(Protocol):
    """Hooks for progress; the CLI renders them (cli/progress.py), a scheduled run logs them."""

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None: ...
    def file_done(self, ref: FileRef, result: Result) -> None: ...
    def dir_done(self, report: DirReport) -> None: ...
    def measured(self, spread: float) -> None: ...
    def progress(self, files: int, nbytes: int) -> None: ...  # rewrite: so far, while parts run
    def note(self, text: str) -> None: ...


class LogEvents:
    """A scheduled run's events: its notes go to the log, the rest is its record's."""

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None:
        pass

    def file_done(self, ref: FileRef, result: Result) -> None:
        pass

    def dir_done(self, report: DirReport) -> None:
        pass

    def measured(self, spread: float) -> None:
        pass

    def progress(self, files: int, nbytes: int) -> None:
        pass

    def note(self, text: str) -> None:
        logging.getLogger("rebal.job.rebalance").info("%s", text)


class Run:
    """A rebalance under way: its options, its pool's figures as they were last measured, its limits
    and budgets; what both passes (copy_pass, inplace_pass) and the engine's loop share."""


    def __init__(self, prep: Prepared, opts: Options, host: ZfsHost, conn: sqlite3.Connection, events: Events,
                 stop: threading.Event) -> None:
        self.prep, self.opts, self.host, self.conn = prep, opts, host, conn
        self.events, self.stop = events, stop
        self.pool_name = prep.pool.name
        self.reserve = prep.pool.size * opts.reserve_percent / 100
        self.throttle = Throttle(opts.max_rate)
        self._copier = None
        self.swap_pool: ThreadPoolExecutor | None = None  # the copy pass's second pool of threads (barriers and swaps), while it runs
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
        self._need_for: tuple[tuple[int, float] | None, int | None] | None = None  # (settled_at, need): bytes_to_go's cache
        self.last_pool: Pool | None = None  # the pool as last measured in the run
        self.on_measured: Callable[[Pool], None] | None = None  # told each measurement (steering's end)
        self.steering: Callable[[], int] | None = None  # steered: what the vdevs it fills can still take
        self.best = prep.pool.spread  # the lowest settled spread of the run
        self.risen = False  # stopped by the rise guard: the run ends incomplete (a new plan, not a resume)
        self.dir_start = 0  # the copy pass: bytes moved when the directory being copied began
        self.dir_need: int | None = None  # and what of it the measured placement says reaches the target
        self._model: DirModel | None = None  # measured placement: the done directories folded in so far
        self._folded: set[bytes] = set()
        self._ranked: dict[bytes, DirEntry] = {}
        self._folded_n = 0  # of report.done_dirs

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
            pool = self.host.settled(self.pool_name)
            self.last_settle = time.monotonic()
            self.settled_at = (self.moved, pool.spread)
            self._past_best(pool.spread)
        else:
            [pool] = self.host.pools([self.pool_name])
            if self._guarded() and pool.spread > self.best + max(1.0, self.opts.target_spread / 2):
                return self.measure(settle=True)  # a rise is looked at settled before the run stops on it
        self.spread_now = pool.spread
        self.last_pool = pool
        if self.on_measured is not None:
            self.on_measured(pool)
        self.events.measured(pool.spread)
        return pool.spread

    def _past_best(self, spread: float) -> None:
        """The spread rose well over the best it reached in this run: the emptier vdevs went past
        the mean (a directory too large for the pool's size near the end), and everything left to
        rewrite lies on the vdevs that are now the emptier ones: going on could only make it worse.
        The run stops there (measured: a 512 MiB-vdev pool that went on rewrote everything and
        ended at 38 points from 3)."""
        self.best = min(self.best, spread)
        if self._guarded() and spread > self.best + max(1.0, self.opts.target_spread / 2):
            self.risen = True
            self.stop_reason = (f"the spread rose from {self.best:.1f} to {spread:.1f}: what is left lies on the "
                                "vdevs that are now the emptier ones, and rewriting it would make it worse")
            self.stop.set()

    def _guarded(self) -> bool:
        """The rise guard holds for every run that has a spread to reach: steered or not (unsteered,
        the first rewrites put more than the mean on the new vdevs: measured on OpenZFS 2.4.4, an
        unsteered run that went on rewrote the whole tree and ended at 15.6 points, its best near
        the target). Not for --all (everything, whatever the spread) nor a run that waits for
        snapshots to go (its spread rises until they do)."""
        return not self.all and not self.growth

    def stop_line(self) -> float:
        """A little under the target: figures rounded to 3 digits (old ZFS) and the last frees landing
        must not put the spread back over it right after the run."""
        target = self.opts.target_spread
        return target - max(0.3, 0.05 * target)

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
        if self.steer_window() == 0:  # steered, its window written: settled, so ZFS sees the fill too
            return self.measure(settle=True) <= self.stop_line()
        if (self.moved - self.moved_at_measure < self.measure_every and not self.growth
                and time.monotonic() - self.last_measure < SETTLE_EVERY and not self.near(target)):
            return False
        if self.growth:  # old copies stay until their snapshots go: the model says when the goal holds then
            self.measure(settle=False)
            self.report.spread_when_freed = spread(simulate(fills(self.prep.pool), self.moved,
                                                            threshold=self.prep.plan.threshold))
            return self.report.spread_when_freed <= self.stop_line()
        plan = self.prep.plan
        if plan.measured:  # where the rewritten directories' data was, measured
            predicted = self._measured_spread()
        else:
            predicted = spread(simulate(fills(self.prep.pool), self.moved, plan.pinned_fraction,
                                        threshold=plan.threshold)) + self._offset()
        # stop a little under the target: figures rounded to 3 digits (old ZFS) and the last frees
        # landing must not put the spread back over it right after the run
        line = self.stop_line()
        if predicted <= target or time.monotonic() - self.last_settle >= SETTLE_EVERY:
            return self.measure(settle=True) <= line  # (the raw figures first were a `zpool list` for nothing)
        if self.measure(settle=False) <= target:  # the model may be wrong: the raw figures say it is there
            return self.measure(settle=True) <= line
        return False

    def enter_dir(self, d: DirEntry) -> None:
        """The copy pass starts directory ``d``. With measured placement, the share of it that takes
        the spread to the stop line is found once, from its own placement (``need_here``), simulated
        from the pool as last measured: one directory's simulation, whatever was done before it (the
        directories done since that measurement are not in it: the share found is then too large,
        never too small, by at most what moved since)."""
        self.dir_start = self.moved
        self.dir_need = None
        plan = self.prep.plan
        if not plan.measured or self.all or self.growth:
            return
        base = fills(self.last_pool or self.prep.pool)
        line = self.stop_line()

        def under(moves: int) -> bool:
            return spread(simulate_dirs(base, [replace(d, alloc=moves)], plan.pinned_fraction, plan.threshold)) <= line

        if not under(d.moves):
            return  # the whole directory does not reach it: no share to stop at
        lo, hi = 0, d.moves
        while hi - lo > max(d.moves // 200, 1):
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if under(mid) else (mid, hi)
        self.dir_need = hi

    def steer_window(self) -> int | None:
        """Steered: bytes to rewrite before looking again (half of what the vdevs taking the writes
        can still take, less what was rewritten since the last look); None: not steered."""
        if self.steering is None:
            return None
        return max(0, self.steering() // 2 - (self.moved - self.moved_at_measure))

    def need_here(self) -> int | None:
        """Bytes still to move inside the directory being copied before the stop line: by the
        directory's own measured placement until the pool was measured inside it, then by the model
        shifted to that measurement (``bytes_to_go``); None where neither can say."""
        window = self.steer_window()
        if self.prep.plan.measured and (self.settled_at is None or self.settled_at[0] <= self.dir_start):
            need = None if self.dir_need is None else max(0, self.dir_need - (self.moved - self.dir_start))
        else:
            need = self.bytes_to_go(measured_too=True)
        return window if need is None else need if window is None else min(need, window)

    def reached_in_dir(self) -> bool:
        """Inside a directory (the copy pass, after each batch): is the stop line reached? A file is
        the unit, not a directory: a large directory must not carry the spread far under the target
        (seen: target 10, a 93 MB directory took the pool from 9.8 to 4.0). Asked of the model
        shifted to the last settled measurement (no `zpool` call), then confirmed by a settled
        measurement, at most once per eighth of the bytes between two measurements."""
        need = self.need_here()  # None: --all, snapshots holding old copies, out of reach
        if need is None or need > 0 or (self.moved - self.moved_at_measure < self.measure_every // 8
                                        and self.steer_window() is None):
            return False
        try:
            return self.measure(settle=True) <= self.stop_line()
        except RebalError:  # a pool that cannot be measured now: not here, with a batch still in flight;
            return False  # the check after the directory asks again (and fails the run there if it must)

    def near(self, target: float, more: int = 0, dirs: tuple = ()) -> bool:
        """Is the model's spread, given what was rewritten so far (and ``more`` bytes in ``dirs``
        about to be), near the target? Then measure."""
        plan = self.prep.plan
        if plan.measured:
            predicted = self._measured_spread(dirs)
        else:
            predicted = spread(simulate(fills(self.prep.pool), self.moved + more, plan.pinned_fraction,
                                        threshold=plan.threshold)) + self._offset()
        return predicted <= target + 1.0

    def _measured_spread(self, extra: tuple = ()) -> float:
        """The model's spread with the directories done so far (and ``extra``, about to be), each with
        its measured placement, in the order they were done: each directory is folded in once, so
        a run of n directories costs n simulations, not n*n/2."""
        plan = self.prep.plan
        if self._model is None:
            self._model = DirModel(fills(self.prep.pool), plan.pinned_fraction, plan.threshold)
            self._ranked = {d.path: d for d in plan.ranked}
        done = self.report.done_dirs
        for p in done[self._folded_n:]:
            if p in self._ranked and p not in self._folded:
                self._model.add(self._ranked[p])
                self._folded.add(p)
        self._folded_n = len(done)
        model = self._model
        more = [self._ranked[p] for p in dict.fromkeys(extra) if p in self._ranked and p not in self._folded]
        if more:
            model = model.copy()
            for d in more:
                model.add(d)
        return spread(model.fills())

    def _offset(self) -> float:
        """How far the pool's last settled spread lay above the model's (by bytes moved): the model
        is shifted by it from then on (the next settled measurement corrects it again)."""
        if self.settled_at is None:
            return 0.0
        at, measured = self.settled_at
        return measured - spread(simulate(fills(self.prep.pool), at, self.prep.plan.pinned_fraction,
                                         threshold=self.prep.plan.threshold))

    def bytes_to_go(self, measured_too: bool = False) -> int | None:
        """Bytes still to rewrite for the spread to reach the stop line (a little under the target),
        by the model shifted to the last settled measurement; None where it cannot say (placement
        measured per directory unless ``measured_too``, snapshots holding old copies, or the line
        out of reach)."""
        plan = self.prep.plan
        if self.all or self.growth or (plan.measured and not measured_too):
            return None
        # the model's answer changes only with a settled measurement (its offset): asked once per
        # measurement, not per batch (6 ms a call here, ten times that under TCG, 64 small files a batch)
        if self._need_for is None or self._need_for[0] != self.settled_at:
            line = self.stop_line() - self._offset()
            need = None if line <= 0 else bytes_to_target(fills(self.prep.pool), line, self.movable, plan.pinned_fraction,
                                                             plan.threshold)
            self._need_for = (self.settled_at, need)
        need = self._need_for[1]
        return None if need is None else max(0, need - self.moved)

    # limits

    def limit_hit(self) -> str:
        if self.stop.is_set():
            return self.stop_reason or Outcome.INTERRUPTED
        if self.opts.max_bytes is not None and self.report.bytes >= self.opts.max_bytes:
            return f"--max-bytes reached ({human(self.report.bytes)} rewritten)"
        if self.opts.until is not None and time.time() >= self.opts.until:
            return "the end of the time window (--until) was reached"
        return ""

    # one directory, zfs rewrite
