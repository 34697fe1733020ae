"""What the backup commands do beyond one replication: restore and verify with their run records,
the backup host's scrub. Library code: returns reports, never prints."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

from .. import state
from ..config import Config, Replicate
from ..errors import UsageError
from ..outcome import Outcome
from ..replicate.job import connect, find_job
from ..transport import Wire

if TYPE_CHECKING:
    from .verify import VerifyReport



def list_points(cfg: Config, job: str):
    """(job config, dataset on the backup host, restore points of its root, and for a recursive zfs
    job each dataset's newest backup: a tree's restore point is per dataset, and that is what
    `restore --all --at latest` brings back of each)."""
    from ..zfs.host import HostError
    from .restore import RestoreError, points
    from .restore_tree import pick
    from ..replicate.sides import job_hosts

    j = find_job(cfg, job)
    newest: dict[str, str | None] = {}
    with connect(j) as ssh:
        ds, pts = points(j, ssh)
        if j.mode == "zfs" and j.recursive and pts:
            try:
                tree = job_hosts(j, ssh)[1].tree(j.target, recursive=True)
            except HostError as e:
                raise RestoreError(f"backup host: {e}") from None
            if tree is not None:
                newest = {d: pick(s, pts[-1], True) for d, s in sorted(tree.snaps.items())}
    return j, ds, pts, newest


def restore(cfg: Config, job: str, *, to: str, at: str, path: str | None, force: bool, dry_run: bool,
            stop: threading.Event, progress: Callable[[int], None] | None = None, whole_tree: bool = False, key_location: str | None = None):
    """Restore a point of a job (whole dataset, every dataset of it with ``whole_tree``, or one
    path) and record the run (not for a dry run)."""
    from ..recorded import recorded
    from .restore import RestoreReport, choose, path_dest, points, restore_dataset, restore_path
    from .restore_tree import TreeReport, TreeRestoreFailed, restore_tree

    j = find_job(cfg, job)
    if key_location is not None and (not whole_tree or not j.raw):
        raise UsageError("--key-location is for --all of a raw job (its encrypted datasets come back raw)")
    if key_location is not None and not key_location.startswith(("file:///", "https://", "http://")):
        raise UsageError(f"--key-location {key_location!r}: give the key's keylocation, like file:///root/data.key")
    # bad input and what is refused here are said at once, before the backup host is reached, and
    # are no failed run
    if whole_tree and (path or force):
        raise UsageError("--all restores every dataset of the job; it takes neither --path nor "
                         "--force (nothing is overwritten: restore --to a new name)")
    if path:
        path_dest(path, to, force)
    else:
        from .. import names

        names.dataset(to)  # a dataset (or a tree) restores into a dataset name
    conn = None if dry_run else state.connect(cfg.state_db)
    last = [0.0]

    with recorded(conn, "restore", job=job, dry_run=dry_run) as run:
        def on_bytes(nbytes: int) -> None:
            if progress:
                progress(nbytes)
            if run.id is not None and time.monotonic() - last[0] >= 0.5:
                last[0] = time.monotonic()
                state.set_progress(cfg.state_db, run.id, nbytes)

        try:
            with connect(j) as ssh:
                _ds, pts = points(j, ssh)
                point = choose(pts, at)
                rep: TreeReport | RestoreReport
                if whole_tree:
                    rep = restore_tree(j, ssh, point, to, dry_run=dry_run, stop=stop, progress=on_bytes,
                                       key_location=key_location, latest=at == "latest")
                elif path:
                    rep = restore_path(j, ssh, point, path, to, force=force, dry_run=dry_run, stop=stop)
                else:
                    rep = restore_dataset(j, ssh, point, to, force=force, dry_run=dry_run, stop=stop,
                                          progress=on_bytes)
        except TreeRestoreFailed as e:
            run.details = asdict(e.report)
            raise
        run.details = asdict(rep)
    return rep


def verify(cfg: Config, job: str, sample: str, seed: int):
    """Check a job's backup against the source; record, notify; returns (level, report)."""
    from .. import health as H
    from ..notify import notify_outcome
    from .verify import verify_rsync, verify_zfs

    j = find_job(cfg, job)
    if sample != "all" and not sample.isdigit():
        raise UsageError("--sample takes a number of files or all")
    n = None if sample == "all" else int(sample)
    conn = state.connect(cfg.state_db)
    from ..recorded import recorded

    with recorded(conn, "verify", job=job) as run:
        with connect(j) as ssh:
            if j.mode == "zfs":
                rep = verify_zfs(j, ssh, n, seed)
                if rep.only_bookmark is not None and not _differs_already(rep) and not rep.gated:
                    rep = _verify_at_a_fresh_snapshot(cfg, j, ssh, n, seed, conn) or rep
            else:
                row = state.last_of_job(conn, "replicate", job, (Outcome.OK, Outcome.WARNING))
                snap = json.loads(row["details"]).get("snapshot") if row else None
                rep = verify_rsync(j, ssh, n, seed, snap)
        level = rep.level
        run.outcome = {H.OK: Outcome.OK, H.WARNING: Outcome.WARNING, H.CRITICAL: Outcome.FAILED}[level]
        run.details = rep.as_dict()
    notify_outcome(cfg.notify, conn, f"verify:{job}", run.outcome.value,
                   "; ".join(f.message for f in rep.findings) or None)
    return level, rep


def _differs_already(rep: VerifyReport) -> bool:
    """A report with a critical finding already (the backup differs by guid, ...) is not helped by a new run."""
    from ..health import CRITICAL

    return rep.level >= CRITICAL


def _verify_at_a_fresh_snapshot(cfg: Config, j: Replicate, ssh: Wire, n: int | None, seed: int,
                                conn: sqlite3.Connection | None) -> VerifyReport | None:
    """The source keeps its last replicated point only as a bookmark (the default: nothing pins what
    a rebalance rewrites), so there is no source content of that time to compare the backup with.
    Replicate once more, keeping that run's snapshot on the source, compare both sides at it, then
    destroy it on the source again (its bookmark stays the cursor, as the job's own retention would
    have left it). None when that run did not land (the report of the bookmark check stands)."""
    from dataclasses import replace

    from ..locks import Together
    from ..replicate.job import run_job
    from ..replicate.policy import is_ours
    from .verify import verify_zfs

    rs = j.retention_source
    keep = replace(j, retention_source=replace(rs, last=max(1, rs.last)))
    # the job's together- key held from the run to the snapshot's end: a rebalance that starts meanwhile
    # waits rather than finds its data pinned by a snapshot that is about to go
    with Together(cfg.state_db, [j.name], f"verify of job {j.name}"):
        outcome, details = run_job(replace(cfg, replicate=[keep if x.name == j.name else x for x in cfg.replicate]),
                                   j.name, conn=conn, every=True)  # a snapshot of every dataset, unchanged ones too
        snap = details.get("snapshot")
        if outcome not in (Outcome.OK, Outcome.WARNING) or not snap:
            return None
        try:
            rep = verify_zfs(j, ssh, n, seed)
        finally:
            if rs.last == 0 and not (rs.hourly or rs.daily or rs.weekly or rs.monthly) and is_ours(snap, j.name):
                from ..replicate.sides import job_hosts

                from ..replicate import guard

                source, backup = job_hosts(j, ssh)  # a pull job's source is the other end
                # with its bookmarks: the cursor that lets the snapshot go (the guard looks for it)
                tree = source.listing(j.source, j.recursive)  # only where it was taken (a job may leave some out)
                there = backup.listing(j.target, j.recursive, bookmarks=False)
                for ds in sorted(d for d, v in tree.items() if any(s.name == snap and not s.bookmark for s in v)):
                    other = there.get(j.target + ds[len(j.source):], [])
                    v = guard.allowed(ds, "source", tree[ds], [snap], other=other)
                    if v.allowed:
                        source.destroy_snapshot(ds, snap)
                    else:
                        rep.notes.append(f"{ds}@{snap} kept on the source: {v.refused[snap]}")
    rep.notes.append(f"replicated first (run {details.get('run_id')}) so that the source and the backup share "
                     f"@{snap} to compare; the source keeps it only as a bookmark again, as its retention says")
    return rep


def scrub_backup(cfg: Config, job: str) -> tuple[str, str, str]:
    """Start a scrub of the pool that holds a job's backup: (host, pool, 'started' or 'running')."""
    from .restore import _remote_dataset_of

    j = find_job(cfg, job)
    with connect(j) as ssh:
        ds = j.target if j.mode == "zfs" else _remote_dataset_of(ssh, j.target)
        if not ds:
            raise UsageError(f"the target of job {job} is not on a ZFS dataset: nothing to scrub")
        from ..zfs.host import HostError
        from ..replicate.sides import job_hosts

        target_pool = ds.split("/")[0]
        backup = job_hosts(j, ssh)[1]  # the backup's host: this one for a pull job
        try:
            what = backup.scrub(target_pool)
        except HostError as e:
            raise UsageError(f"backup host: {str(e).split(': ', 1)[-1]}") from None
        return backup.where, target_pool, "running" if what == "running" else "started"
