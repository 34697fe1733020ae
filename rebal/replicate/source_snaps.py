"""A job's snapshots on its source's host (here for a push job, the other end for a pull job):
taken at one instant (`take_snapshot`), and many destroyed where they are in few commands
(`destroy_where_they_are`). The calls themselves are `zfs.host.ZfsHost`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from ..errors import CommandFailed, RebalError
from ..zfs.host import ZfsHost
from . import guard
from .policy import snapshot_name


class SnapshotError(RebalError):
    pass


def destroy_where_they_are(host: ZfsHost, root: str, recursive: bool, having: dict[str, list[str]],
                           datasets: int) -> dict[str, str]:
    """Destroy each snapshot name of ``having`` in the datasets listed for it: one `destroy -r` of
    the tree for the names all ``datasets`` have (a recursive job), one per dataset for the rest,
    each a comma list where the ZFS takes one. Returns the names not destroyed somewhere, with why."""
    whole = [n for n, where in having.items() if recursive and len(where) == datasets]
    failed = host.destroy_each(root, whole, recursive=True) if whole else {}
    per_ds: dict[str, list[str]] = {}
    for n, where in having.items():
        if n not in whole:
            for d in where:
                per_ds.setdefault(d, []).append(n)
    for d, ns in per_ds.items():
        for n, why in host.destroy_each(d, ns).items():
            failed.setdefault(n, f"{d}@{n}: {why}")
    return failed


def take_snapshot(host: ZfsHost, source: str, job: str, recursive: bool, clock: Callable[[], datetime],
                  sleep: Callable[[float], None] = time.sleep, tries: int = 3,
                  avoid: frozenset[str] | set[str] = frozenset(), datasets: list[str] | None = None,
                  left_out: Sequence[str] = ()) -> str:
    """Snapshot ``source`` (and, ``recursive``, its children) as rebal-<job>-<UTC second>; the name.
    A run that follows another within the same second would take the same name: zfs refuses it
    ("dataset already exists") where the last run's snapshot is still on the source, and where it
    was pruned its bookmark and the backup's copy (names in ``avoid``) would clash later. Then wait
    for the next second and take that one. The snapshot is atomic, so a refused one made nothing;
    any other failure is raised as it is. ``datasets``: snapshot exactly these (one atomic command), not
    ``source`` recursively (a job that leaves some of its children out)."""
    for attempt in range(tries):
        when = clock()
        snap = snapshot_name(job, when)
        if snap not in avoid:
            try:
                if datasets is None:
                    host.snapshot([f"{source}@{snap}"], recursive=recursive)
                else:
                    _snapshot_some(host, source, snap, datasets, left_out)
                return snap
            except Exception:
                if attempt == tries - 1 or not host.exists(f"{(datasets or [source])[0]}@{snap}"):
                    raise
        sleep(1.001 - when.microsecond / 1e6)
    raise SnapshotError(f"no free snapshot name for {source} after {tries} tries (is the clock stuck?)")


def planned_snapshot(source: str, snap: str, recursive: bool, datasets: list[str] | None) -> str:
    """What take_snapshot would run, for a dry run's plan."""
    if datasets is None:
        return f"zfs snapshot {'-r ' if recursive else ''}{source}@{snap}"
    return "zfs snapshot " + " ".join(f"{d}@{snap}" for d in datasets)


def _snapshot_some(host: ZfsHost, source: str, snap: str, datasets: list[str],
                   left_out: Sequence[str]) -> None:
    """Snapshot ``datasets`` at one instant: one `zfs snapshot a@s b@s ...`. A ZFS that takes one name
    per command (zfs-fuse: "too many arguments") gets the source's recursive snapshot, then the
    snapshot destroyed again on the datasets ``left_out`` (still one instant for the chosen ones)."""
    try:
        host.snapshot([f"{d}@{snap}" for d in datasets])
    except CommandFailed as e:
        if "too many arguments" not in e.stderr:
            raise
        host.snapshot([f"{source}@{snap}"], recursive=True)
        for d in left_out:  # taken a moment ago, by this name: it holds nothing the dataset does not
            if guard.allowed(d, "source", [], [snap], named={snap}).allowed:
                host.destroy_snapshots(d, [snap])
