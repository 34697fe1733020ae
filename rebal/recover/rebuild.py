"""`rebal rebuild POOL --job JOB`: the complete rebalance, a pool rebuilt from its backup.

A guided procedure, each step recorded in SQLite (tables rebuilds and rebuild_steps) so that a cut at
any point goes on from it. rebal never destroys the pool: the admin does, between the two halves.

1. ``check``: every dataset of the pool is in the job (or named by --leave-out); a last replication
   whose snapshot is kept on the source is the restore point; nothing was written after it (writers
   stopped: `written@POINT` is 0 on every dataset); every file of the backup is compared with the
   source at that point (verify, sample all). Then the pool's layout and properties, the datasets'
   own properties and encryption are recorded, and the commands to destroy and recreate the pool are
   given.
2. ``continue``, once the new pool exists (another pool guid, empty): the whole tree is restored at the
   point (restore_tree: resumable, the guid kept), encryption roots made as they were, the datasets'
   properties set again, every file verified against the backup; the job then goes on incrementally.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .. import names, state
from ..config import Config, Replicate
from ..errors import RebalError, UsageError
from ..replicate.job import connect, find_job
from .rebuild_record import Record, RebuildError, RebuildRefused, load, save  # noqa: F401 (RebuildError: for callers)
from ..zfs.host import ZfsHost
from ..replicate.sides import job_hosts


def _job_for(cfg: Config, pool: str, job: str) -> Replicate:
    j = find_job(cfg, job)
    if j.mode != "zfs" or j.direction != "push":
        raise UsageError(f"job {job}: a rebuild restores by zfs send from the backup: it needs a zfs-mode push job")
    if not (j.source == pool or j.source.startswith(pool + "/")):
        raise UsageError(f"job {job} backs up {j.source}, not pool {pool}")
    return j


def check(cfg: Config, pool: str, job: str, *, leave_out: tuple[str, ...] = (), ashift: int = 12,
          seed: int = 0, writers_stopped: bool = False) -> Record:
    """Step 1: everything that must hold before the admin destroys the pool; the record of it."""
    from .rebuild_steps import coverage, final_point, record_pool

    names.pool(pool)
    j = _job_for(cfg, pool, job)
    conn = state.connect(cfg.state_db)
    old = load(conn, pool)
    if old is not None and old.step in ("restoring", "restored", "configured"):  # the pool was made again
        raise RebuildRefused(f"a rebuild of {pool} is under way (step {old.step}): rebal rebuild {pool} --continue "
                             f"goes on with it, --status says where it stands")
    rec = Record(pool, j.name, left_out=list(leave_out))
    with connect(j) as link:
        here, _ = job_hosts(j, link)
        if not writers_stopped and not _says_written(here, j.source):  # before a replication or a record
            raise RebuildRefused(NO_WRITTEN)
        coverage(rec, j, here)
        save(conn, rec, "covered", f"{len(rec.datasets)} dataset(s) in job {j.name}"
             + (f", left out: {', '.join(rec.left_out)}" if rec.left_out else ""))
        final_point(cfg, rec, j, link, here, conn, seed=seed, writers_stopped=writers_stopped)
        record_pool(rec, j, here, ashift)
    save(conn, rec, "checked", "the pool's layout and properties recorded; the admin destroys and recreates it")
    return rec


NO_WRITTEN = ("this ZFS cannot say whether anything is written after the restore point (no written@ property): "
              "stop every writer, then pass --writers-stopped")


def _says_written(here: ZfsHost, dataset: str) -> bool:
    """Whether this ZFS has the `written` property (zfs-fuse has none): asked before any work."""
    try:
        here.values(dataset, ["written"], recursive=False)
    except RebalError:
        return False
    return True


def status(cfg: Config, pool: str) -> Record:
    names.pool(pool)
    rec = load(state.connect(cfg.state_db), pool)
    if rec is None:
        raise UsageError(f"no rebuild of {pool} is recorded (rebal rebuild {pool} --job JOB starts one)")
    return rec


def go_on(cfg: Config, pool: str, *, stop: threading.Event | None = None,
          progress: Callable[[int], None] | None = None) -> Record:
    """Step 2, after the admin made the new pool: restore, keys, properties, verify."""
    from .rebuild_steps import encryption_again, properties_again, restore_all, verify_all

    names.pool(pool)
    conn = state.connect(cfg.state_db)
    rec = load(conn, pool)
    if rec is None:
        raise UsageError(f"no rebuild of {pool} is recorded (rebal rebuild {pool} --job JOB starts one)")
    if rec.step in ("covered", "pointed"):
        raise RebuildRefused(f"the check of {pool} did not finish (step {rec.step}): run rebal rebuild {pool} "
                             f"--job {rec.job} again before destroying anything")
    if rec.step == "done":
        rec.notes.append("the rebuild was done already")
        return rec
    j = _job_for(cfg, pool, rec.job)
    with connect(j) as link:
        here, _ = job_hosts(j, link)
        if rec.step == "checked":
            guid = here.pool_props(pool, local_only=False).get("guid", "") if _pool_exists(here, pool) else ""
            if not guid:
                raise RebuildRefused(f"there is no pool {pool} yet: make it as rebal rebuild {pool} --status shows")
            if guid == rec.pool_guid:
                raise RebuildRefused(f"{pool} is still the pool that was checked (guid {guid}): it has not been "
                                     f"destroyed and made again; rebal rebuild {pool} --status shows the commands")
            save(conn, rec, "restoring", f"the new pool {pool} (guid {guid})")
        if rec.step == "restoring":
            restore_all(rec, j, link, stop=stop, progress=progress)
            save(conn, rec, "restored", f"every dataset at @{rec.point}")
        if rec.step == "restored":
            encryption_again(rec, here)
            properties_again(rec, here)
            save(conn, rec, "configured", "encryption roots and the datasets' own properties as they were")
        if rec.step == "configured":
            verify_all(rec, j, link)
            save(conn, rec, "done", f"{rec.files[0]} files equal the backup's at @{rec.point}")
    return rec


def _pool_exists(here: ZfsHost, pool: str) -> bool:
    try:
        here.pool_props(pool)
    except RebalError:
        return False
    return True
