"""The rebalance: resolve targets, measure, scan, plan; then rewrite directory by directory,
re-measuring after each, until the CAP spread is under the target or a limit is reached.

Library code: it never prints. What happens is told through an `Events` object; problems a user can
act on are `RebalError`s.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from .. import state
from ..errors import RebalError, UsageError
from ..locks import FileLock
from ..units import human
from ..zfs.model import Pool
from . import journal, rewrite
from .copier import Copier, FileRef, Outcome, Result, Throttle
from .planner import DirEntry, Plan, VdevFill, make_plan, order_dirs, simulate, spread
from .scan import Filters, ScanResult, candidates, scan

BATCH_FILES = 64
BATCH_BYTES = 256 << 20
SETTLE_EVERY = 10.0  # seconds: settle at least this often between directories
RETRIES = 2  # a file that changed while copied is tried again this often in the same run


class RefusedError(RebalError):
    exit_code = 2


@dataclass
class Options:
    targets: list[str]
    target_spread: float = 10.0
    max_bytes: int | None = None
    until: float | None = None  # epoch seconds
    max_rate: float | None = None
    verify: str = "hash"
    method: str = "auto"
    jobs: int = 0
    allow_snapshots: bool = False
    rewrite_all: bool = False  # every eligible file, whatever the spread (after a RAIDZ expansion, say)
    hardlinks: bool = False  # re-create hardlink groups whose every name lies in the targets
    reserve_percent: float = 10.0
    filters: Filters = field(default_factory=Filters)


@dataclass
class Target:
    dataset: str
    mountpoint: str
    root: bytes  # the directory to rewrite (the mountpoint, or a directory below it)


@dataclass
class Prepared:
    pool: Pool
    targets: list[Target]
    scan: ScanResult
    plan: Plan
    method: str  # copy or rewrite
    physical: bool
    jobs: int
    snapshots: list[tuple[str, int]]
    warnings: list[str]
    notes: list[str]
    resume_run: int | None = None
    done_dirs: set[bytes] = field(default_factory=set)

    @property
    def key(self) -> str:
        return run_key(self.pool.name, [t.root for t in self.targets])


@dataclass
class DirReport:
    path: bytes
    files: int = 0
    bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    spread: float | None = None


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

    def as_dict(self) -> dict:
        return {
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
    """Hooks for progress; the CLI renders them. All no-ops here."""

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None: ...
    def file_done(self, ref: FileRef, result: Result) -> None: ...
    def dir_done(self, report: DirReport) -> None: ...
    def measured(self, spread: float) -> None: ...
    def note(self, text: str) -> None: ...


# -- resolve and plan ---------------------------------------------------------------------------


def run_key(pool: str, roots: list[bytes]) -> str:
    return json.dumps({"pool": pool, "roots": sorted(os.fsdecode(r) for r in roots)})


def fills(pool: Pool) -> list[VdevFill]:
    return [VdevFill(v.name, v.size, v.alloc) for v in pool.data_vdevs]


def resolve_targets(zfs, specs: list[str]) -> list[Target]:
    """Each TARGET is a dataset name or a directory inside a mounted dataset."""
    from .. import names

    out: list[Target] = []
    for spec in specs:
        if spec.startswith("/") or spec.startswith("."):
            path = os.path.realpath(spec)
            if not os.path.isdir(path):
                raise UsageError(f"{spec}: not a directory")
            ds, mp = zfs.dataset_for_path(path)
            out.append(Target(ds, mp, os.fsencode(path)))
        else:
            names.dataset(spec)
            mp = zfs.mountpoint(spec)
            out.append(Target(spec, mp, os.fsencode(mp)))
    # a target inside another one would be walked twice
    out.sort(key=lambda t: len(t.root))
    kept: list[Target] = []
    for t in out:
        if not any(t.root == k.root or t.root.startswith(k.root.rstrip(b"/") + b"/") for k in kept):
            kept.append(t)
    pools = {t.dataset.split("/")[0] for t in kept}
    if len(pools) > 1:
        raise UsageError(f"targets lie on several pools ({', '.join(sorted(pools))}); rebalance one pool at a time")
    return kept


def default_jobs(n_data_vdevs: int) -> int:
    """Enough files in flight to keep every data vdev busy, bounded by the cores."""
    # Measured on zfs-fuse, 2 cores, 2 vdevs, 6,000 files of 4-64 KiB (bench/rebalance.py):
    # 1 job 3.3x the baseline's files/s, 2 jobs 5.0x, 4 jobs 5.5x, 8 jobs 5.6x. Small files wait
    # on fsync and metadata round trips, so more files in flight than cores pays.
    cores = os.cpu_count() or 2
    return max(4, min(16, 2 * n_data_vdevs, 4 * cores))


def prepare(opts: Options, zpool, zfs, conn=None) -> Prepared:
    targets = resolve_targets(zfs, opts.targets)
    pool_name = targets[0].dataset.split("/")[0]
    [pool] = zpool.pools([pool_name])
    if len(pool.data_vdevs) < 2:
        raise RefusedError(f"pool {pool_name} has {len(pool.data_vdevs)} data vdev: nothing to balance")
    warnings: list[str] = []
    notes: list[str] = []

    # snapshots pin old blocks: rewriting what they reference grows the pool, moves nothing
    snaps: list[tuple[str, int]] = []
    datasets = sorted({t.dataset for t in targets})
    for ds in datasets:
        snaps += zfs.snapshots(ds)
        if zfs.get(ds, ["dedup"]).get("dedup", "off") not in ("off", "-"):
            warnings.append(f"dedup is on for {ds}: a rewrite there may only add a reference, not move data")
    newest = max((c for _, c in snaps), default=None)

    # resume: directories finished by an earlier, unfinished run of the same targets
    resume_run, done = None, set()
    key = run_key(pool_name, [t.root for t in targets])
    if conn is not None:
        row = conn.execute(
            "SELECT id FROM runs WHERE kind = 'rebalance' AND key = ? ORDER BY id DESC LIMIT 1", (key,)
        ).fetchone()
        if row is not None:
            last = conn.execute("SELECT outcome FROM runs WHERE id = ?", (row[0],)).fetchone()[0]
            if last in (None, "interrupted", "stopped", "failed"):
                resume_run = row[0]
                done = journal.done_dirs(conn, resume_run)

    method, physical = "copy", False
    if opts.method in ("auto", "rewrite"):
        sup = rewrite.detect(zfs, zpool, pool_name)
        if sup.available:
            method, physical = "rewrite", sup.physical
        elif opts.method == "rewrite":
            raise RefusedError("this zfs has no 'zfs rewrite' (OpenZFS 2.3.4+); use --method copy")
        else:
            notes.append("zfs rewrite is not available here: files are rewritten by copy-and-rename")

    filters = opts.filters
    sc = scan([t.root for t in targets], filters, newest_snapshot=newest, hardlinks_ok=(method == "rewrite"),
              link_groups=(opts.hardlinks and method == "copy"))
    remaining = [d for d in sc.dirs if d.path not in done]
    pinned_fraction = (sc.pinned_bytes / sc.bytes) if sc.bytes else 0.0
    plan = make_plan(fills(pool), remaining, opts.target_spread, max_bytes=opts.max_bytes, pinned_fraction=pinned_fraction)

    if sc.pinned_bytes:
        newest_name = max(snaps, key=lambda s: s[1])[0]
        warnings.append(
            f"{human(sc.pinned_bytes)} of the data to rewrite is referenced by {len(snaps)} snapshot(s) "
            f"(newest {newest_name}): rewriting it grows the pool by that much instead of moving it"
        )
    hl = sc.skips.counts.get("hardlinked", 0)
    if hl:
        warnings.append(f"{hl} hardlinked file(s) ({human(sc.skips.bytes.get('hardlinked', 0))}) will be skipped "
                        "(--hardlinks re-creates link groups that lie wholly in the target)")
    out = sc.skips.counts.get("hardlinked, with names outside the target", 0)
    if out:
        warnings.append(f"{out} hardlinked file(s) have names outside the target and will be skipped")
    if sc.groups:
        notes.append(f"{len(sc.groups)} hardlink group(s) ({human(sc.group_bytes)}) will be re-created as groups "
                     "after the directories")
    sp = sc.skips.counts.get("special file (socket, fifo or device)", 0)
    if sp:
        warnings.append(f"{sp} special file(s) (sockets, fifos, devices) will be skipped")
    reserve = pool.size * opts.reserve_percent / 100
    avail = _avail(targets[0].root)
    if sc.largest and avail - sc.largest < reserve:
        warnings.append(
            f"not enough free space for the largest file ({human(sc.largest)}) plus the reserve "
            f"({human(reserve)}): {human(avail)} available; files that do not fit are skipped"
        )
    try:
        for st in zpool.status([pool_name]):
            if "expanded raidz" in st.scan or "expansion of raidz" in st.scan:
                notes.append(
                    "a RAIDZ vdev of this pool was expanded: rewriting old blocks also moves them to the new "
                    "data:parity ratio and reclaims space"
                )
    except RebalError:
        pass
    if plan.needed_bytes is None and plan.spread_before > opts.target_spread:
        warnings.append(
            f"rewriting all {human(plan.candidate_bytes)} under the targets is predicted to leave the spread at "
            f"{plan.spread_after:.1f} points, above the target {opts.target_spread:g}"
        )
    jobs = opts.jobs or default_jobs(len(pool.data_vdevs))
    return Prepared(pool, targets, sc, plan, method, physical, jobs, snaps, warnings, notes, resume_run, done)


def _avail(path: bytes) -> int:
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize


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
        self.copier = Copier(opts.verify, stop, Throttle(opts.max_rate))
        self.report: Report
        self.stop_reason = ""
        self.last_settle = time.monotonic()
        self.spread_now = prep.pool.spread
        self.linked_seen: set[int] = set()  # hardlinked inodes already rewritten in place

    # measuring

    def measure(self, settle: bool) -> float:
        if settle:
            self.zpool.settle(self.pool_name)
            self.last_settle = time.monotonic()
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
        raw = self.measure(settle=False)
        if self.opts.rewrite_all:
            return False
        predicted = spread(simulate(fills(self.prep.pool), self.report.bytes, self.prep.plan.pinned_fraction))
        if raw <= target or predicted <= target or time.monotonic() - self.last_settle >= SETTLE_EVERY:
            # stop a little under the target: figures rounded to 3 digits (old ZFS) and the last
            # frees landing must not put the spread back over it right after the run
            return self.measure(settle=True) <= target - max(0.3, 0.05 * target)
        return False

    # limits

    def limit_hit(self) -> str:
        if self.stop.is_set():
            return self.stop_reason or "interrupted"
        if self.opts.max_bytes is not None and self.report.bytes >= self.opts.max_bytes:
            return f"--max-bytes reached ({human(self.report.bytes)} rewritten)"
        if self.opts.until is not None and time.time() >= self.opts.until:
            return "the end of the time window (--until) was reached"
        return ""

    # one directory, copy method

    def copy_dir(self, pool: ThreadPoolExecutor, d: DirEntry, root: bytes, dev: int) -> DirReport:
        rep = DirReport(d.path)
        try:
            dfd = os.open(d.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            rep.skipped[f"directory unreadable ({e.strerror})"] = d.files
            return rep
        try:
            dst = os.fstat(dfd)
            journal.start_dir(self.conn, self.report.run_id, d.path, dst)
            todo = [FileRef.from_stat(d.path, n, st) for n, st in candidates(d.path, root, dev, self.opts.filters)]
            for attempt in range(RETRIES + 1):
                retry: list[FileRef] = []
                while todo:
                    if self.limit_hit():
                        return rep
                    batch, todo = self.take_batch(todo, rep)
                    if not batch:
                        if todo:  # nothing more fits under --max-bytes
                            self.stop_reason = f"--max-bytes reached ({human(self.report.bytes)} rewritten)"
                            self.stop.set()
                        continue
                    ids = journal.begin_batch(self.conn, self.report.run_id, batch)
                    results = list(pool.map(lambda r: self.copier.copy(dfd, r), batch))
                    outcomes = []
                    for jid, ref, res in zip(ids, batch, results):
                        outcomes.append((jid, res.outcome.value, res.reason, res.copy_ino))
                        self.events.file_done(ref, res)
                        if res.outcome is Outcome.SWAPPED:
                            rep.files += 1
                            rep.bytes += ref.size
                            self.report.files += 1
                            self.report.bytes += ref.size
                        elif res.outcome is Outcome.CHANGED and attempt < RETRIES:
                            fresh = _restat(dfd, ref)
                            if fresh:
                                retry.append(fresh)
                        else:
                            key = res.outcome.value
                            rep.skipped[key] = rep.skipped.get(key, 0) + 1
                            if res.outcome is Outcome.NOSPACE:
                                self.stop_reason = f"the pool is full (ENOSPC copying {os.fsdecode(ref.path)})"
                                self.stop.set()
                    journal.finish_batch(self.conn, outcomes)
                todo = retry
                if not todo:
                    break
            return rep
        finally:
            try:
                os.utime(dfd, ns=(dst.st_atime_ns, dst.st_mtime_ns))
            except OSError:
                pass
            os.close(dfd)

    def take_batch(self, todo: list[FileRef], rep: DirReport) -> tuple[list[FileRef], list[FileRef]]:
        """The next files to copy at once, as many as fit above the free-space reserve."""
        room = _avail(todo[0].dir) - self.reserve
        batch: list[FileRef] = []
        size = 0
        rest: list[FileRef] = []
        for i, ref in enumerate(todo):
            if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
                rest.extend(todo[i:])
                break
            if self.opts.max_bytes is not None and self.report.bytes + size + ref.size > self.opts.max_bytes:
                if not batch and self.report.bytes == 0 and ref.size > self.opts.max_bytes:
                    rep.skipped["larger than --max-bytes"] = rep.skipped.get("larger than --max-bytes", 0) + 1
                    continue
                rest.extend(todo[i:])
                break
            if size + ref.size > room:
                if room <= 0:
                    self.stop_reason = f"free space reached the reserve ({human(self.reserve)})"
                    self.stop.set()
                    rest.extend(todo[i:])
                    break
                if ref.size > room:
                    rep.skipped["too large for the space above the reserve"] = (
                        rep.skipped.get("too large for the space above the reserve", 0) + 1
                    )
                    continue
                rest.extend(todo[i:])
                break
            batch.append(ref)
            size += ref.size
        return batch, rest

    # one directory, zfs rewrite

    def rewrite_dir(self, d: DirEntry, root: bytes, dev: int) -> DirReport:
        from ..errors import CommandFailed

        rep = DirReport(d.path)
        journal.start_dir(self.conn, self.report.run_id, d.path, os.lstat(d.path))
        files = []
        for n, st in candidates(d.path, root, dev, self.opts.filters, hardlinks_ok=True):
            if st.st_nlink > 1:  # an inode with several names is rewritten once
                if st.st_ino in self.linked_seen:
                    continue
                self.linked_seen.add(st.st_ino)
            files.append((n, st))
        paths = [os.path.join(d.path, n) for n, _ in files]
        sizes = {os.path.join(d.path, n): st.st_size for n, st in files}
        for argv in rewrite.argv_batches(paths, self.prep.physical):
            if self.limit_hit():
                break
            try:
                self.zfs.run_rewrite(argv)
            except CommandFailed as e:
                rep.skipped["zfs rewrite failed"] = rep.skipped.get("zfs rewrite failed", 0) + len(argv) - 2
                self.events.note(str(e))
                continue
            for p in argv[2:]:
                if p.startswith("/"):
                    n = sizes.get(os.fsencode(p), 0)
                    rep.files += 1
                    rep.bytes += n
                    self.report.files += 1
                    self.report.bytes += n
        return rep


def _copy_groups(r: _Run) -> DirReport:
    """Rewrite the hardlink groups, one at a time, each as one new inode under all its names."""
    rep = DirReport(b"(hardlink groups)")
    for group in r.prep.scan.groups:
        if r.limit_hit():
            break
        dirs = sorted({ref.dir for ref in group})
        fds: dict[bytes, int] = {}
        times: dict[bytes, os.stat_result] = {}
        try:
            for d in dirs:
                fds[d] = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                times[d] = os.fstat(fds[d])
                journal.start_dir(r.conn, r.report.run_id, d, times[d])
            jid = journal.begin_group(r.conn, r.report.run_id, group)
            res = r.copier.copy_group([(fds[ref.dir], ref) for ref in group],
                                      on_copy=lambda ino, jid=jid: journal.group_copied(r.conn, jid, ino))
            journal.finish_batch(r.conn, [(jid, res.outcome.value, res.reason, res.copy_ino)])
            r.events.file_done(group[0], res)
            if res.outcome is Outcome.SWAPPED:
                rep.files += len(group)
                rep.bytes += group[0].size
                r.report.files += len(group)
                r.report.bytes += group[0].size
            else:
                rep.skipped[res.outcome.value] = rep.skipped.get(res.outcome.value, 0) + len(group)
        except OSError as e:
            rep.skipped[f"group failed ({e.strerror})"] = rep.skipped.get(f"group failed ({e.strerror})", 0) + 1
        finally:
            for d, fd in fds.items():
                try:
                    os.utime(fd, ns=(times[d].st_atime_ns, times[d].st_mtime_ns))
                except OSError:
                    pass
                os.close(fd)
                journal.end_dir(r.conn, r.report.run_id, d, 0, 0, True)
    return rep


def _restat(dfd: int, ref: FileRef) -> FileRef | None:
    try:
        st = os.stat(ref.name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        return None
    return FileRef.from_stat(ref.dir, ref.name, st)


def execute(prep: Prepared, opts: Options, zpool, zfs, conn, state_db: str, events: Events | None = None,
            stop: threading.Event | None = None) -> Report:
    events = events or Events()
    stop = stop or threading.Event()
    with PoolLock(state_db, prep.pool.name):
        recovered = journal.recover(conn, prep.pool.name)
        if recovered.rows:
            events.note(f"recovered from an earlier crash: {recovered.rows} unfinished file(s), "
                        f"{len(recovered.removed)} temp name(s) removed")
        for path in recovered.left:
            events.note(f"left alone (not recognised as rebal's): {path}")
        if prep.resume_run is not None:
            run_id = prep.resume_run
            conn.execute("UPDATE runs SET outcome = NULL, ended = NULL WHERE id = ?", (run_id,))
            events.note(f"continuing run {run_id}: {len(prep.done_dirs)} directories already done")
        else:
            run_id = state.start_run(conn, "rebalance", pool=prep.pool.name, key=prep.key)
        r = _Run(prep, opts, zpool, zfs, conn, events, stop)
        r.report = Report(run_id, "failed", "", spread_before=prep.pool.spread, predicted_after=prep.plan.spread_after)
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
            dirs = order_dirs([d for d in prep.scan.dirs if d.path not in prep.done_dirs])
            events.start(prep, sum(d.files for d in dirs), sum(d.bytes for d in dirs))
            r.report.outcome, r.report.reason = _loop(r, dirs)
        except BaseException as e:
            r.report.outcome, r.report.reason = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            if timer:
                timer.cancel()
            if old_sigio is not None:
                signal.signal(signal.SIGIO, old_sigio)
            r.report.seconds = time.monotonic() - t0
            try:
                r.report.spread_after = r.measure(settle=True)
            except RebalError:
                r.report.spread_after = r.spread_now
            state.end_run(conn, run_id, r.report.outcome, error=r.report.reason if r.report.outcome == "failed" else None,
                          details=r.report.as_dict() | {"method": prep.method, "jobs": prep.jobs})
        return r.report


def _step_done(r: _Run, rep: DirReport) -> bool:
    """After a directory (or the hardlink groups): measure, tally, report; True at the target."""
    reached = r.target_reached() and not r.opts.rewrite_all
    rep.spread = r.spread_now
    for k, n in rep.skipped.items():
        r.report.skipped[k] = r.report.skipped.get(k, 0) + n
    r.events.dir_done(rep)
    return reached


def _loop(r: _Run, dirs: list[DirEntry]) -> tuple[str, str]:
    prep, opts = r.prep, r.opts
    if r.spread_now <= opts.target_spread and not opts.rewrite_all:
        return "ok", f"spread {r.spread_now:.1f} is within the target {opts.target_spread:g}"
    roots = {t.root: os.lstat(t.root).st_dev for t in prep.targets}
    with ThreadPoolExecutor(max_workers=prep.jobs, thread_name_prefix="rebal-copy") as pool:
        for d in dirs:
            why = r.limit_hit()
            if why:
                return ("interrupted" if why == "interrupted" else "stopped"), why
            root = next(rt for rt in sorted(roots, key=len, reverse=True) if d.path == rt or d.path.startswith(rt.rstrip(b"/") + b"/"))
            dev = roots[root]
            rep = r.rewrite_dir(d, root, dev) if prep.method == "rewrite" else r.copy_dir(pool, d, root, dev)
            finished = not r.stop.is_set()
            journal.end_dir(r.conn, r.report.run_id, d.path, rep.files, rep.bytes, finished)
            r.report.dirs += finished
            if _step_done(r, rep):
                return "ok", f"spread {r.spread_now:.1f} is under the target {opts.target_spread:g}"
    if prep.scan.groups and not r.limit_hit():
        if _step_done(r, _copy_groups(r)):
            return "ok", f"spread {r.spread_now:.1f} is under the target {opts.target_spread:g}"
    why = r.limit_hit()
    if why:
        return ("interrupted" if why == "interrupted" else "stopped"), why
    if opts.rewrite_all:
        return "ok", f"every eligible file was rewritten (--all); the spread is {r.spread_now:.1f}"
    return "incomplete", (f"every eligible directory was rewritten; the spread is {r.spread_now:.1f}, "
                          f"above the target {opts.target_spread:g}")


def until_epoch(hhmm: str, now: datetime | None = None) -> float:
    """The next time of day HH:MM (local time) as epoch seconds."""
    import re

    m = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", hhmm.strip())
    if not m:
        raise UsageError(f"--until {hhmm!r}: give a time of day as HH:MM")
    now = now or datetime.now().astimezone()
    t = now.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0)
    if t <= now:
        t = t.fromtimestamp(t.timestamp() + 86400, tz=t.tzinfo)
    return t.timestamp()

