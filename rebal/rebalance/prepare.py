"""Before a rebalance: resolve the targets, measure the pool, scan, choose the method, plan, and say
what stands in the way (snapshots, dedup, hardlinks, space). Changes nothing.

Library code: it never prints; problems a user can act on are `RebalError`s."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import RebalError, UsageError
from ..units import human
from ..zfs.model import Pool
from ..zfs.queries import EXPANSION_FEATURE, SNAPSHOT_PROPS, features
from . import journal, rewrite
from .options import Options, RefusedError, Target
from .planner import DirEntry, Plan, VdevFill, make_plan
from .steer import Choice, steer_plan
from .scan import AHEAD, Filters, ScanResult, scan

if TYPE_CHECKING:
    from ..zfs.expansion import Expansion
    from ..zfs.host import ZfsHost
    from .rewrite import RewriteSupport

Pins = Callable[["Prepared"], "Prepared"]  # given a preparation, may wait and prepare again (ready)


@dataclass
class Prepared:
    pool: Pool
    targets: list[Target]
    scan: ScanResult
    plan: Plan
    method: str  # copy or rewrite
    physical: bool
    jobs: int
    snapshots: list[tuple[str, int, int]]  # (dataset@name, creation, used) of the targets' snapshots, oldest first
    warnings: list[str]
    notes: list[str]
    resume_run: int | None = None
    done_dirs: set[bytes] = field(default_factory=set)
    reclaim: dict | None = None  # after a RAIDZ expansion: what is at the old ratio, what a rewrite returns
    reclaim_only: bool = False  # one (expanded) data vdev: rewrite every old file, no spread goal
    filters: Filters | None = None  # the filters in force (with the expansion's), for the run
    available: int = 0  # bytes free for the targets now
    reserve: int = 0  # bytes the rebalance leaves free
    costs: dict | None = None  # snapcost.assess: snapshots that pin data, replication growth, pool growth
    scan_seconds: float = 0.0  # how long the walk of the targets took
    purpose: str = "balance"
    steer: Choice | None = None  # steering the allocator: the threshold (None: not steered) and why
    unsteered: Plan | None = None  # steered: the plan as it would be without (what steering saves)
    vdev_ids: tuple | None = None  # where.vdev_names as the plan's measurement read them (None: not measured)

    @property
    def key(self) -> str:
        return run_key(self.pool.name, [t.root for t in self.targets], self.purpose)


# -- resolve and plan ---------------------------------------------------------------------------


def run_key(pool: str, roots: list[bytes], purpose: str = "balance") -> str:
    """What a later run continues: the same pool, roots and purpose (a refresh never continues a balance)."""
    key = {"pool": pool, "roots": sorted(os.fsdecode(r) for r in roots)}
    return json.dumps(key if purpose == "balance" else key | {"purpose": purpose})


def fills(pool: Pool) -> list[VdevFill]:
    return [VdevFill(v.name, v.size, v.alloc, v.alloc + v.free if v.exact else 0) for v in pool.data_vdevs]


def resolve_targets(host: ZfsHost, specs: list[str]) -> list[Target]:
    """Each TARGET is a dataset name or a directory inside a mounted dataset."""
    from .. import names

    out: list[Target] = []
    for spec in specs:
        if spec.startswith("/") or spec.startswith("."):
            path = os.path.realpath(spec)
            if not os.path.isdir(path):
                raise UsageError(f"{spec}: not a directory")
            ds, mp = host.dataset_for_path(path)
            out.append(Target(ds, mp, os.fsencode(path)))
        else:
            names.dataset(spec)
            mp = host.mounted_at(spec)
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


def _measured(opts: Options, dirs: list[DirEntry], targets: list[Target], pool: Pool, host: ZfsHost, filters: Filters,
              notes: list[str]) -> tuple[list[DirEntry], tuple | None]:
    """The directories with their measured placement (opts.placement), a note of what was done, and
    the vdev ids read (or None)."""
    if opts.placement == "model" or not dirs or len(pool.data_vdevs) < 2:
        return dirs, None
    if opts.placement == "auto" and (pool.spread <= opts.target_spread or opts.rewrite_all):
        return dirs, None  # nothing to choose: no directory, or every one, is rewritten
    import shutil

    if shutil.which("zdb") is None:
        if opts.placement == "measured":
            raise RebalError("--placement measured: zdb is not installed (it ships with zfsutils-linux and zfs-fuse)")
        notes.append("placement not measured (no zdb): the plan uses the model")
        return dirs, None
    from .measure import measure_dirs

    out, note, ids = measure_dirs(dirs, targets, pool, host, filters, time_limit=opts.measure_seconds)
    if opts.placement == "measured" and not any(d.placement is not None for d in out):
        raise RebalError(f"--placement measured: {note}")
    notes.append(note)
    return out, ids


def default_jobs(n_data_vdevs: int) -> int:
    """Enough files in flight to keep every data vdev busy, bounded by the cores."""
    # Measured on zfs-fuse, 2 cores, 2 vdevs, 6,000 files of 4-64 KiB (bench/rebalance.py):
    # 1 job 3.3x the baseline's files/s, 2 jobs 5.0x, 4 jobs 5.5x, 8 jobs 5.6x. Small files wait
    # on fsync and metadata round trips, so more files in flight than cores pays.
    cores = os.cpu_count() or 2
    return max(4, min(16, 2 * n_data_vdevs, 4 * cores))


@dataclass
class _Queried:
    """The pool's state before a run, asked at once."""

    targets: list[Target]
    pool: Pool
    expansions: list[Expansion]
    snap_lists: tuple
    dedups: tuple
    rewrite: RewriteSupport | None  # rewrite.detect's answer, None where the method is copy anyway

    @property
    def pool_name(self) -> str:
        return self.targets[0].dataset.split("/")[0]

    @property
    def datasets(self) -> list[str]:
        return sorted({t.dataset for t in self.targets})


def _query(opts: Options, host: ZfsHost) -> _Queried:
    """The pool's queries at once, each a process of its own: one after the other they would be a
    good part of a small run's fixed cost."""
    targets = resolve_targets(host, opts.targets)
    pool_name = targets[0].dataset.split("/")[0]
    datasets = sorted({t.dataset for t in targets})
    with ThreadPoolExecutor(max_workers=4 + 2 * len(datasets), thread_name_prefix="rebal-query") as ex:
        may_rewrite = opts.method in ("auto", "rewrite")
        f_pool = ex.submit(host.pools, [pool_name], features(may_rewrite))
        f_feat = ex.submit(_features, host, pool_name, f_pool, features(may_rewrite))
        f_exp = ex.submit(_expansions, host, pool_name, f_feat)
        f_snaps = [ex.submit(host.snapshot_costs, ds, SNAPSHOT_PROPS) for ds in datasets]
        f_rw = ex.submit(lambda: rewrite.detect(host, pool_name, f_feat.result())) if may_rewrite else None
        [pool] = f_pool.result()  # in the order they ran before: the first failure is the same
        expansions = f_exp.result()
        snap_lists, dedups = zip(*[f.result() for f in f_snaps]) if f_snaps else ((), ())
        sup = f_rw.result() if f_rw is not None else None
    return _Queried(targets, pool, expansions, snap_lists, dedups, sup)


def _snapshots(q: _Queried, warnings: list[str]) -> list[tuple[str, int, int]]:
    """The targets' snapshots, oldest first (they pin old blocks: rewriting what they reference grows
    the pool, moves nothing); a warning where dedup is on."""
    snaps: list[tuple[str, int, int]] = []
    for ds, found, props in zip(q.datasets, q.snap_lists, q.dedups):
        snaps += found
        if props.get("dedup", "off") not in ("off", "-"):
            warnings.append(f"dedup is on for {ds}: a rewrite there may only add a reference, not move data")
    snaps.sort(key=lambda s: s[1])
    return snaps


def _method(opts: Options, sup: RewriteSupport | None, notes: list[str]) -> tuple[str, bool]:
    """(method, physical): zfs rewrite where this ZFS has it (-P where it keeps the logical birth)."""
    if sup is None:
        return "copy", False
    if sup.available:
        return "rewrite", sup.physical
    if opts.method == "rewrite":
        raise RefusedError("this zfs has no 'zfs rewrite' (OpenZFS 2.3.4+); use --method copy")
    notes.append("zfs rewrite is not available here: files are rewritten by copy-and-rename")
    return "copy", False


def _resume(conn: sqlite3.Connection | None, pool_name: str, targets: list[Target], opts: Options,
            reclaim_after_expansion: bool) -> tuple[int | None, set[bytes]]:
    """(the earlier unfinished run of the same targets, the directories it finished); after a RAIDZ
    expansion also those rewritten since it (at the new ratio already)."""
    resume_run: int | None = None
    done: set[bytes] = set()
    if conn is None:
        return resume_run, done
    from .. import state

    resume_run = state.resumable_run(conn, "rebalance", run_key(pool_name, [t.root for t in targets], opts.purpose))
    if resume_run is not None:
        done = journal.done_dirs(conn, resume_run)
    if reclaim_after_expansion and opts.filters.expanded_at is not None:
        done = done | journal.dirs_done_since(conn, pool_name, opts.filters.expanded_at)
    return resume_run, done


def prepare(opts: Options, host: ZfsHost, conn: sqlite3.Connection | None = None, *, free: Callable[[str], None] | None = None) -> Prepared:
    """Measure, scan and plan. ``conn``: the state database (None: no resume, as a plan without one).
    ``free(pool)``: raises where another rebalance of the pool runs, asked before the scan."""
    import time

    from .prepare_say import reclaim_estimate, scan_warnings

    q = _query(opts, host)
    pool, pool_name, targets = q.pool, q.pool_name, q.targets
    if free is not None:
        free(pool_name)
    if any(not e.done for e in q.expansions):
        raise RefusedError(f"a RAIDZ expansion of pool {pool_name} is still running: wait for it "
                           f"(zpool wait -t raidz_expand {pool_name}), then rewrite the old blocks")
    # (a refresh rewrites what its filter names, whatever an expansion left at the old ratio)
    expanded = [e for e in q.expansions if e.done and e.ended is not None and opts.purpose == "balance"]
    if len(pool.data_vdevs) < 2 and not expanded and opts.purpose == "balance":
        raise RefusedError(f"pool {pool_name} has {len(pool.data_vdevs)} data vdev and no expanded RAIDZ vdev: "
                           "nothing to balance or reclaim")
    # one data vdev, expanded: the goal is the capacity the old data:parity ratio holds back
    reclaim_only = len(pool.data_vdevs) < 2
    if expanded:
        from dataclasses import replace

        opts = replace(opts, filters=replace(opts.filters, expanded_at=max(e.ended for e in expanded if e.ended is not None),
                                             only_old=reclaim_only))
    warnings: list[str] = []
    notes: list[str] = []
    snaps = _snapshots(q, warnings)
    method, physical = _method(opts, q.rewrite, notes)
    filters = opts.filters
    t_scan = time.monotonic()
    # creation is in whole seconds: a file written in the snapshot's second may be in it (+1: counted)
    sc = scan([t.root for t in targets], filters, snapshot_times=[s[1] + 1 for s in snaps], hardlinks_ok=(method == "rewrite"),
              link_groups=(opts.hardlinks and method == "copy"), keep=AHEAD if method == "rewrite" and opts.listing else 0)
    scan_seconds = time.monotonic() - t_scan
    resume_run, done = _resume(conn, pool_name, targets, opts, bool(expanded and reclaim_only))

    remaining = [d for d in sc.dirs if d.path not in done]
    pinned_fraction = (sc.pinned_bytes / sc.bytes) if sc.bytes else 0.0
    # allowed to rewrite what snapshots hold: the old copies stay until they go, and the goal is the
    # spread then (while they stay, the new copies only add to every vdev)
    waits = bool(opts.allow_snapshots and sc.pinned_bytes)
    remaining, vdev_ids = _measured(opts, remaining, targets, pool, host, filters, notes)
    def planned(threshold: int | None = None) -> Plan:
        return make_plan(fills(pool), remaining, opts.target_spread, max_bytes=opts.max_bytes, threshold=threshold,
                         pinned_fraction=0.0 if waits else pinned_fraction, everything=opts.rewrite_all or reclaim_only)

    plan, steered, unsteered = planned(), None, None
    # --all steered as well: everything is rewritten, but what the first stretch writes lands on the
    # emptier vdevs, so it ends balanced instead of near where it began
    if opts.steer and opts.purpose == "balance" and not reclaim_only and plan.dirs:
        steered, plan, unsteered = steer_plan(pool, plan, planned, lambda: host.pools([]))
        notes.append(steered.reason)
    if waits:
        from .planner import simulate, spread

        meanwhile = spread(simulate(fills(pool), plan.bytes, pinned_fraction))
        notes.append(f"snapshots hold {human(sc.pinned_bytes)} of it: the spread goal ({plan.spread_after:.1f} predicted) "
                     f"holds once they go; until then the old copies stay and the spread is about {meanwhile:.1f}")
    reserve = pool.size * opts.reserve_percent / 100
    avail = _avail(targets[0].root)
    warnings += scan_warnings(sc, snaps, reserve, avail, notes)
    reclaim = None
    if expanded:
        reclaim = reclaim_estimate(opts, targets, host, expanded, remaining, sc, reclaim_only, notes)
    if plan.needed_bytes is None and plan.spread_before > opts.target_spread:
        warnings.append(
            f"rewriting all {human(plan.candidate_bytes)} under the targets is predicted to leave the spread at "
            f"{plan.spread_after:.1f} points, above the target {opts.target_spread:g}"
        )
    jobs = opts.jobs or default_jobs(len(pool.data_vdevs))
    prep = Prepared(pool, targets, sc, plan, method, physical, jobs, snaps, warnings, notes, resume_run, done,
                    reclaim=reclaim, reclaim_only=reclaim_only, filters=filters, available=avail, reserve=int(reserve),
                    scan_seconds=scan_seconds, purpose=opts.purpose, steer=steered, unsteered=unsteered,
                    vdev_ids=vdev_ids)
    from .snapcost import assess

    prep.costs = assess(prep, opts.replication_jobs, budget=opts.max_growth)
    return prep


def _features(host: ZfsHost, pool_name: str, f_pool: Future[list[Pool]], wanted: tuple[str, ...]) -> dict[str, str]:
    """The pool's feature states: as `zpool list -j` gave them with the figures, else (an older
    zpool, zfs-fuse) from `zpool get`."""
    try:
        [pool] = f_pool.result()
    except Exception:  # noqa: BLE001 - the figures' error is the run's, raised where they are read
        return {}
    return dict(pool.features) if pool.features is not None else host.pool_features(pool_name, wanted)


def _expansions(host: ZfsHost, pool_name: str, f_feat: Future[dict[str, str]] | None = None) -> list[Expansion]:
    """The pool's RAIDZ expansions from `zpool status`, asked only where the expansion feature may be
    active: while it is enabled or disabled, no vdev was ever expanded (one process less a run)."""
    if f_feat is not None and f_feat.result().get(EXPANSION_FEATURE) in ("enabled", "disabled"):
        return []
    try:
        statuses = host.status([pool_name])
    except RebalError:
        return []
    if not any("expan" in st.scan for st in statuses):  # neither "expanded" nor "expansion of": none
        return []
    from ..zfs.expansion import parse_expansions

    return [e for st in statuses for e in parse_expansions(st)]


def _avail(path: bytes) -> int:
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize




def ready(opts: Options, host: ZfsHost, conn: sqlite3.Connection | None = None, *, pins: Pins | None = None, free: Callable[[str], None] | None = None) -> Prepared:
    """Prepared and checked, for every caller that goes on to run (the command, the schedule, each
    refresh pass): the targets writable, snapshot-pinned data refused unless allowed. ``pins``: given
    the prepared run, may wait for the replication jobs that pin its data and return a new
    preparation (the schedule: a run of those jobs may drop their snapshots)."""
    return checked(prepare(opts, host, conn, free=free), opts, pins=pins)


def checked(prep: Prepared, opts: Options, *, pins: Pins | None = None) -> Prepared:
    """``prep`` through the checks a run must pass (ready() without the preparation)."""
    check_writable(prep)
    if pins is not None:
        prep = pins(prep)
    check_pinned(prep, opts)
    return prep


def check_writable(prep: Prepared) -> None:
    """Refuse at once where the targets are mounted read-only to rebal, rather than fail every file."""
    for t in prep.targets:
        if os.statvfs(t.root).f_flag & os.ST_RDONLY:
            raise RefusedError(
                f"{os.fsdecode(t.root)} is read-only to rebal: the dataset has readonly=on, or rebal runs in a "
                "systemd sandbox (ProtectSystem=strict) without it in ReadWritePaths: `rebal units` writes the "
                "drop-ins for both shipped units, then `systemctl daemon-reload`")


def check_pinned(prep: Prepared, opts: Options) -> None:
    """Refuse to rewrite snapshot-pinned data unless allowed: it would grow the pool and move nothing
    until the snapshots go. The message gives the three ways out, with this pool's figures."""
    if not prep.scan.pinned_bytes or opts.allow_snapshots:
        return
    costs = prep.costs or {"snapshots": [], "replication": [], "growth": {}}
    snaps = costs["snapshots"]
    ours = [s for s in snaps if s["owner"].startswith("rebal:")]
    others = [s for s in snaps if not s["owner"].startswith("rebal:")]
    g = costs.get("growth", {})
    held = ", ".join(f"{s['name']} ({human(s['pinned_bytes'])}, {s['owner'][6:] if s in ours else s['tool'] or 'other'})"
                     for s in snaps[-4:]) or f"{len(prep.snapshots)} snapshot(s)"
    lines = [f"{human(prep.scan.pinned_bytes)} of the data to rewrite is held by snapshots of "
             f"{', '.join(sorted({t.dataset for t in prep.targets}))}: {held}. Rewriting it would grow the pool by "
             f"about {human(g.get('bytes', prep.scan.pinned_bytes))} and move nothing until they go. Ways out:"]
    if ours:
        when = "; ".join(f"{s['name'].partition('@')[2]} goes {s['expires_when']}" for s in ours[-2:])
        lines.append(f"  1. replication that pins nothing: rebal's own snapshots here ({when}) need not stay. Where the "
                     "ZFS has bookmarks (OpenZFS) the job's base is a bookmark and retention_source keeps no snapshot "
                     "(the default); then run the rebalance right after the replication (schedule.rebalance_after).")
    else:
        lines.append("  1. let the snapshots expire (or destroy them) first; rebal's own replication pins nothing where "
                     "the ZFS has bookmarks")
    if others:
        lines.append(f"     {len(others)} snapshot(s) belong to other tools ({', '.join(sorted({s['tool'] or 'unknown' for s in others}))}): "
                     "their own retention decides when that space returns")
    room = max(0, g.get("available", 0) - g.get("reserve", 0))
    lines.append(f"  2. --allow-snapshots --max-growth SIZE: rewrite within a growth budget ({human(room)} free above the "
                 f"reserve now); the space returns and the balance shows when those snapshots go")
    repl = [r for r in costs["replication"] if r["next_incremental_bytes"]]
    if repl:
        lines.append(f"  3. zfs rewrite -P (OpenZFS 2.4+, pool feature physical_rewrite"
                     f"{': available here' if prep.physical else ': not on this pool'}) keeps birth times, so the next "
                     f"incremental of {', '.join(r['job'] for r in repl)} does not carry the "
                     f"{human(repl[0]['next_incremental_bytes'])} a {prep.method} would add")
    else:
        lines.append("  3. zfs rewrite -P (OpenZFS 2.4+, pool feature physical_rewrite) keeps birth times: a replication "
                     "does not send the rewritten data again (it still grows the pool while snapshots hold the old copy)")
    raise RefusedError("\n".join(lines))
