"""One replication run of a configured job: lock, run record, the mode's replicator, the outcome."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from dataclasses import asdict

from .. import state
from ..config import Config, Replicate, Retention
from ..errors import RebalError, UsageError
from ..locks import FileLock
from ..outcome import Outcome
from ..recorded import Run, recorded
from ..units import parse_size
from .hooks import run_hook
from .policy import Buckets, parse_snapshot_name
from ..transport import TransportError, Wire
from .wire import connect, endpoint  # noqa: F401  (imported from here too)
from .zfs_send import DatasetReport, Job, ReplicationError, ZfsReplicator, ZfsReport, kill_all

if TYPE_CHECKING:  # the rsync mode is imported by the run that needs it (a zfs job's start does not pay it)
    from .rsync import RsyncReplicator, RsyncReport


class HookFailed(RebalError):
    exit_code = 1


def buckets(r: Retention) -> Buckets:
    return Buckets(r.hourly, r.daily, r.weekly, r.monthly, r.last)


def default_parallel() -> int:
    """Datasets sent at once by default: a stream waits on disks and the network more than on a
    core (ssh's cipher is its CPU), so twice the cores, at most 8."""
    import os

    return max(1, min(8, 2 * (os.cpu_count() or 1)))


def find_job(cfg: Config, name: str) -> Replicate:
    j = cfg.job(name)
    if j is None:
        known = ", ".join(x.name for x in cfg.replicate) or "none configured"
        raise UsageError(f"no replication job named {name!r} (jobs: {known})")
    return j


def replicator(j: Replicate, ssh: Wire, every: bool = False, **kw: Any):
    """The mode's replicator. ``every``: snapshot and send every dataset, unchanged ones too."""
    if j.mode == "zfs":
        job = Job(j.name, j.source, j.target, j.recursive, j.raw, j.compressed, j.large_blocks, j.embedded,
                  parse_size(j.bwlimit) if j.bwlimit else None, j.stream_compress, j.mbuffer,
                  buckets(j.retention_source), buckets(j.retention_target), pull=j.direction == "pull",
                  stream_compress_level=j.stream_compress_level, mbuffer_size=j.mbuffer_size,
                  exclude=tuple(j.exclude), include=tuple(j.include), by_property=j.by_property,
                  parallel=j.parallel or default_parallel(), skip_unchanged=not every,
                  keep_base=j.keep_base)
        return ZfsReplicator(job, ssh, **kw)
    from .rsync import RsyncJob, RsyncReplicator

    kw.pop("force_rollback", None)
    rjob = RsyncJob(j.name, j.source, j.target, j.recursive,
                    f"{max(1, parse_size(j.bwlimit) // 1024)}K" if j.bwlimit else None,
                    j.snapshot_target, buckets(j.retention_source), buckets(j.retention_target),
                    exclude=tuple(j.exclude), include=tuple(j.include), by_property=j.by_property)
    return RsyncReplicator(rjob, ssh, **kw)


def record_landed(conn: sqlite3.Connection, job: str, r: ZfsReplicator | RsyncReplicator, outcome: str) -> None:
    """What is now on the target, per dataset (health's snapshot ages): the zfs mode's datasets
    that landed, even in a run that failed for others; the rsync mode's after a run that got through."""
    rows: list[tuple[str, str, float]] = []
    rep = r.report
    if isinstance(r, ZfsReplicator):  # a dataset that sat the run out (nothing written) is current as of now
        rows += [(d.source, d.base, time.time()) for d in r.report.datasets if d.kind == "unchanged" and d.base]
    snap = rep.snapshot
    parsed = parse_snapshot_name(snap) if snap else None
    if snap and parsed is not None:
        if isinstance(r, ZfsReplicator):
            landed = [d.source for d in r.report.datasets if d.kind in ("full", "incremental", "nothing")]
        else:
            landed = list(r.datasets) if outcome in (Outcome.OK, Outcome.WARNING) else []
        rows += [(d, snap, parsed[1].timestamp()) for d in landed]
    if rows:
        state.record_points(conn, job, rows)


def run_job(cfg: Config, name: str, *, dry_run: bool = False, force_rollback: tuple[str, ...] = (),
            stop: threading.Event | None = None, progress: Callable[..., None] | None = None,
            conn: sqlite3.Connection | None = None, on_wait: Callable[[str], None] | None = None,
            every: bool = False, on_dataset: Callable[[DatasetReport], None] | None = None,
            wire: Wire | None = None) -> tuple[Outcome, dict]:
    """Run one job. Returns (outcome, details); outcome is ok, warning or failed. Never raises for a
    failed transfer: that is recorded; raises for bad input and for a run that is already going.
    Waits while a rebalance of data this job replicates runs (``on_wait`` is told). ``wire``: the
    job's connection where the caller began it early (wire.early); closed here however the run ends."""
    try:
        return _run_job(cfg, name, dry_run, force_rollback, stop, progress, conn, on_wait, every, on_dataset, wire)
    finally:
        if wire is not None:
            wire.close()


def _run_job(cfg: Config, name: str, dry_run: bool, force_rollback: tuple[str, ...], stop: threading.Event | None,
             progress: Callable[..., None] | None, conn: sqlite3.Connection | None,
             on_wait: Callable[[str], None] | None, every: bool,
             on_dataset: Callable[[DatasetReport], None] | None, wire: Wire | None) -> tuple[Outcome, dict]:
    j = find_job(cfg, name)
    for ds in force_rollback:
        if not (_within(ds, j.source) or _within(ds, j.target)):
            raise UsageError(f"--force-rollback {ds}: not a dataset of job {name} (its source {j.source} or its "
                             f"backup {j.target}, or below them)")
    stop = stop or threading.Event()
    if dry_run:
        return _dry_run(j, every, force_rollback, stop, wire)
    conn = conn or state.connect(cfg.state_db)
    over = state.record(conn, state.failover_key(name)) if j.direction == "pull" or j.local_target else None
    if over is not None:  # (a push job's backup host is asked by its gate, which refuses too)
        raise UsageError(f"job {name} is failed over since {over.get('since')}: its backup is written here now, and a "
                         f"run would receive over it. `rebal failback {name}` brings those writes to the file server "
                         "and starts the replication again")
    from ..locks import Together

    with FileLock(cfg.state_db, f"replicate-{name}", f"run of replication job {name}"), \
            Together(cfg.state_db, [name], f"replication job {name}", stop=stop, on_wait=on_wait):
        state.mark_dead_runs(conn, "replicate", job=name)
        with recorded(conn, "replicate", job=name, pool=(j.source if j.direction == "push" else j.target).split("/")[0]) as run:
            return _recorded_run(j, run, conn, cfg.state_db, every, force_rollback, stop, progress, on_dataset, wire)


def _recorded_run(j: Replicate, run: Run, conn: sqlite3.Connection, state_db: str, every: bool,
                  force_rollback: tuple[str, ...], stop: threading.Event, progress: Callable[..., None] | None,
                  on_dataset: Callable[[DatasetReport], None] | None, wire: Wire | None = None) -> tuple[Outcome, dict]:
    """The run, its record ``run`` (its row's outcome, details and error set here, however it ends)."""
    assert run.id is not None
    name, run_id = j.name, run.id
    t0 = time.monotonic()
    details: dict = {"job": name, "mode": j.mode, "run_id": run_id}
    run.details = details
    outcome, error = Outcome.FAILED, None
    r = None
    last = [0.0]

    def progress_and_record(n: int, total: int | None = None) -> None:
        if progress:
            progress(n, total)
        now = time.monotonic()
        if now - last[0] >= 0.5:  # at most twice a second
            last[0] = now
            state.set_progress(state_db, run_id, n)

    hook_env = {"REBAL_JOB": name, "REBAL_SOURCE": j.source, "REBAL_TARGET": j.target,
                "REBAL_TARGET_HOST": j.remote_host or "", "REBAL_RUN_ID": str(run_id)}
    pinged = _ping(j, "start", f"rebal replicate {name}: run {run_id} started")
    try:
        if j.pre_command:
            problem = run_hook(j.pre_command, "pre", hook_env, j.hook_timeout, stop)
            if problem:  # nothing was snapshot or sent
                raise HookFailed(f"{problem}; no snapshot was taken, nothing was sent")
        with wire or connect(j) as ssh:
            # a bar's total needs zfs send -nP per stream: asked only when someone watches a bar
            extra = {"cache": state.Cache(conn), "estimates": progress is not None, "on_dataset": on_dataset,
                     "landed": {d: s for d, (s, _) in state.replica_points(conn, name).items()}} if j.mode == "zfs" else {}
            r = replicator(j, ssh, every, force_rollback=force_rollback, stop=stop, progress=progress_and_record, **extra)
            rep = r.run()
        details |= asdict(rep)
        details["bytes"] = rep.bytes
        outcome, error = _outcome(rep, stop)
    except (TransportError, ReplicationError, RebalError) as e:
        error = str(e)
        details["exit_code"] = e.exit_code  # the command's exit code: 6 for an unreachable host
        if r is not None:
            details |= asdict(r.report)
            details["bytes"] = r.report.bytes
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        outcome = _after(j, conn, r, outcome, error, details, hook_env)
        pinged += _ping(j, "success" if outcome in (Outcome.OK, Outcome.WARNING) else "fail", _ping_body(name, outcome, error, details))
        if pinged:  # the monitor not reached: said, the run's outcome stands
            details.setdefault("warnings", []).extend(pinged)
        details["seconds"] = round(time.monotonic() - t0, 2)
        details["outcome"] = outcome
        details["error"] = error
        run.outcome, run.error = outcome, error
    return outcome, details


def _ping(j: Replicate, event: str, body: str) -> list[str]:
    """The job's dead-man ping (ping.py), where it has a ping_url: what did not get through."""
    if not j.ping_url:
        return []
    from ..ping import ping

    problem = ping(j.ping_url, event, body)
    return [problem] if problem else []


def _ping_body(name: str, outcome: str, error: str | None, details: dict) -> str:
    """The last lines the monitor shows: the outcome, the error, what was sent."""
    lines = [f"rebal replicate {name}: {outcome}" + (f": {error}" if error else "")]
    sent = [d for d in details.get("datasets", []) if isinstance(d, dict)]
    if sent:
        lines.append(f"{len(sent)} dataset(s), {details.get('bytes', 0)} bytes")
        lines += [f"{d.get('source')}: {d.get('kind', '')} {d.get('error') or ''}".rstrip() for d in sent[-20:]]
    lines += [f"warning: {w}" for w in details.get("warnings", [])]
    return "\n".join(lines) + "\n"


def _within(ds: str, root: str) -> bool:
    return ds == root or ds.startswith(root + "/")


def _dry_run(j: Replicate, every: bool, force_rollback: tuple[str, ...], stop: threading.Event,
             wire: Wire | None) -> tuple[Outcome, dict]:
    """What a run would do, changing nothing (no record, no hook run: the hooks are named)."""
    with wire or connect(j) as ssh:
        rep = replicator(j, ssh, every, dry_run=True, force_rollback=force_rollback, stop=stop).run()
    hooks = {"pre_command": j.pre_command, "post_command": j.post_command}
    return Outcome.OK, {"job": j.name, "mode": j.mode, "dry_run": True, "local_target": j.local_target,
                  "hooks": {k: v for k, v in hooks.items() if v}} | asdict(rep)


def _outcome(rep: ZfsReport | RsyncReport, stop: threading.Event) -> tuple[Outcome, str | None]:
    """(outcome, error) of a run that got through: interrupted, failed for a dataset, a warning, ok."""
    failed = rep.failed if isinstance(rep, ZfsReport) else []
    if stop.is_set():
        return Outcome.INTERRUPTED, "stopped by a signal"
    if failed:
        return Outcome.FAILED, "; ".join(f"{d.source}: {d.error}" for d in failed)
    if rep.warnings:
        return Outcome.WARNING, None
    return Outcome.OK, None


def _after(j: Replicate, conn: sqlite3.Connection, r: ZfsReplicator | RsyncReplicator | None, outcome: Outcome,
           error: str | None, details: dict, hook_env: dict[str, str]) -> Outcome:
    """However the run ended: its streams ended, what landed recorded (health's ages), the post hook
    run; the outcome, a warning where the post hook failed."""
    if r is not None:
        kill_all(r.procs)
        try:
            record_landed(conn, j.name, r, outcome)
        except (sqlite3.Error, OSError) as e:  # the run's own outcome and error stand, and get recorded
            details.setdefault("warnings", []).append(f"could not record the snapshots that landed: {e}")
    if j.post_command:
        problem = run_hook(j.post_command, "post", hook_env | {
            "REBAL_SNAPSHOT": details.get("snapshot", ""), "REBAL_OUTCOME": outcome,
            "REBAL_BYTES": str(details.get("bytes", 0)), "REBAL_ERROR": error or ""}, j.hook_timeout)
        if problem:
            details.setdefault("warnings", []).append(problem)
            outcome = Outcome.WARNING if outcome == Outcome.OK else outcome
    return outcome
