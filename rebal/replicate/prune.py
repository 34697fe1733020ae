"""Retention of a job's snapshots on the backup host, run there (`rebal prune`): where the backup
host is gated (rebal/gate), the pushing side can no longer destroy anything, so the backup host prunes
its own copies. Only snapshots named `rebal-<job>-<time>` are touched; the newest one of each
dataset always stays (it is the base of the next incremental)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import names
from ..errors import CommandFailed, NoSuchPool, RebalError
from ..process.command import run
from ..process.command import Runner
from ..zfs.host import ZfsHost
from ..zfs.snaps import guid_query, tree_from
from . import guard
from ..transport import Here
from .policy import Buckets, is_ours, retain, snapshot_time


@dataclass
class PruneReport:
    dataset: str
    job: str
    kept: list[str] = field(default_factory=list)  # ds@snap
    destroyed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "ds@snap: why"
    dry_run: bool = False


def prune(dataset: str, job: str, buckets: Buckets, recursive: bool = False, dry_run: bool = False,
          runner: Runner = run) -> PruneReport:
    names.dataset(dataset)
    if not job or not all(c.isalnum() or c in "_.-" for c in job):
        raise RebalError(f"bad job name {job!r}", exit_code=2)
    rep = PruneReport(dataset, job, dry_run=dry_run)
    host = ZfsHost(Here(runner))  # prune runs on the backup host, by hand or through its gate
    res = host.run(guid_query(dataset, recursive=recursive), check=False)
    if res.returncode != 0:
        pool = dataset.split("/")[0]
        if not host.has_pool(pool):
            raise NoSuchPool(f"no such pool: {pool}")
        raise RebalError(f"{dataset}: {res.stderr.strip() or 'no such dataset'}", exit_code=2)
    tree = tree_from(res.stdout)
    for ds in sorted(tree):
        if not (ds == dataset or (recursive and ds.startswith(dataset + "/"))):
            continue
        mine = [s for s in tree[ds] if is_ours(s.name, job)]
        if not mine:
            continue
        newest = max(mine, key=lambda s: s.txg).name
        keep = retain([(s.name, snapshot_time(s.name)) for s in mine], buckets, {newest})
        # the guard (guard.py): the source cannot be seen from here, so it keeps each dataset's newest
        v = guard.allowed(ds, "backup", tree[ds], [s.name for s in mine if s.name not in keep])
        keep |= set(v.refused)
        rep.kept.extend(f"{ds}@{s.name}" for s in mine if s.name in keep)
        drop = v.allowed
        try:
            failed = host.destroy_each(ds, drop, dry_run=dry_run)  # few commands: comma lists
        except (CommandFailed, RebalError) as e:  # a name that fails the check
            failed = {name: str(e) for name in drop}
        rep.destroyed.extend(f"{ds}@{n}" for n in drop if n not in failed)
        rep.failed.extend(f"{ds}@{n}: {why}" for n, why in failed.items())
    return rep
