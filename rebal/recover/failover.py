"""Serving from the backup while the file server is down: `rebal failover JOB`, on the backup host.

The job's backup datasets become writable and mounted (under ``--mountpoint-root``, or where the
backup pool puts them) and are marked failed over: the user property ``rebal:failover`` on the job's
top dataset, which every child inherits, and a record in this host's state database of what was
changed, to put back at failback. From then on nothing may write into them but the admin: the gate
refuses a receive, a snapshot, a `zfs set`, an rsync into a marked dataset (a file server that comes
back cannot roll back what was written here), and a pull run of the job refuses. `rebal failback JOB`
(failback.py) brings what was written here back to the file server and returns the direction.

The job is described on the backup host as a pull job (direction = "pull", source_host = the file
server): the datasets are here, and the file server is only reached at failback.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial as partial_fn

from .. import names
from ..config import Replicate
from ..errors import HostError, RebalError, UsageError
from ..transport import Here
from ..zfs.host import ZfsHost

MARK = names.FAILOVER_PROPERTY  # on the job's top backup dataset while it is failed over (its value: since when)


def record_key(job: str) -> str:
    from ..state import failover_key

    return failover_key(job)


class FailoverRefused(RebalError):
    exit_code = 2


@dataclass
class FailoverReport:
    job: str
    target: str
    since: str = ""  # when it was failed over (UTC)
    already: bool = False  # it was failed over before this command
    mountpoint_root: str | None = None
    datasets: list[dict] = field(default_factory=list)  # name, mountpoint, mounted
    planned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def backup_here(job: Replicate) -> ZfsHost:
    """This host's ZFS, where the job's backup datasets are: a pull job's (or a local target's)."""
    if job.mode != "zfs":
        raise UsageError(f"job {job.name} is an rsync job: its backup is a directory, served as it is "
                         "(failover and failback are for zfs jobs)")
    if job.direction != "pull" and not job.local_target:
        raise UsageError(f"job {job.name} pushes to {job.target_host}: failover runs on the backup host, where the "
                         f"job is described as a pull job (direction = \"pull\", source_host = the file server, "
                         f"source = {job.source}, target = {job.target}); `rebal keys {job.name}` prints it")
    return ZfsHost(Here())


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _mount_root_problem(path: str) -> str | None:
    if not path.startswith("/") or path == "/" or ".." in path.split("/") or any(c in path for c in "\n\t,"):
        return f"--mountpoint-root {path!r}: give an absolute directory other than /, without '..'"
    return None


def marked(host: ZfsHost, dataset: str) -> str | None:
    """The failover mark ``dataset`` carries (set on it or inherited), None without one."""
    try:
        value = host.values(dataset, [MARK], recursive=False).get(dataset, {}).get(MARK, "-")
    except HostError:
        return None
    return None if value in ("-", "") else value


def failover(job: Replicate, conn: sqlite3.Connection | None, *, mountpoint_root: str | None = None, dry_run: bool = False,
             now: float | None = None) -> FailoverReport:
    """Make the job's backup writable and mounted, marked failed over; recorded in ``conn`` (the
    state database, None for a dry run). Run again, it finishes what a cut run left."""
    from .. import state

    host = backup_here(job)
    if mountpoint_root is not None and (p := _mount_root_problem(mountpoint_root)):
        raise UsageError(p)
    rep = FailoverReport(job.name, job.target, mountpoint_root=mountpoint_root)
    old = state.record(conn, record_key(job.name)) if conn is not None else None
    if old is not None and mountpoint_root is not None and old.get("mountpoint_root") != mountpoint_root:
        raise FailoverRefused(f"{job.target} is failed over already, mounted under "
                              f"{old.get('mountpoint_root') or 'its own mount points'}: failback first to change that")
    if not host.exists(job.target):
        raise FailoverRefused(f"no {job.target} on this host: nothing to fail over to (is this the backup host?)")
    props = ["readonly", "mountpoint", "type", MARK] + (["receive_resume_token"] if host.abilities().resumable else [])
    vals = host.values(job.target, props, recursive=job.recursive)
    tree = sorted((d for d in vals if vals[d].get("type") == "filesystem"), key=lambda d: (d.count("/"), d))
    try:
        keys = host.values(job.target, ["keystatus"], recursive=job.recursive)
    except HostError:  # a zfs without native encryption (zfs-fuse)
        keys = {}
    locked = [d for d in tree if keys.get(d, {}).get("keystatus") == "unavailable"]
    if locked:
        raise FailoverRefused(f"{len(locked)} dataset(s) are encrypted and their keys are not loaded here, "
                              f"{locked[0]} first: load them (zfs load-key -r {job.target}, the key the file "
                              "server uses: a raw backup keeps the file server's key), then fail over again")
    already = vals.get(job.target, {}).get(MARK, "-") not in ("-", "")
    rep.already = already and old is not None
    since = (old or {}).get("since") or (vals[job.target][MARK] if already else _iso(now or time.time()))
    rep.since = since
    local = host.local_props(job.target)  # what was set on each before (put back at failback)
    was = (old or {}).get("was") or {d: {p: local.get(d, {}).get(p) for p in ("readonly", "mountpoint")}
                                     for d in tree}
    partial = [d for d in tree if vals[d].get("receive_resume_token", "-") not in ("-", "")]
    steps: list[tuple[str, Callable[[], None]]] = []
    for d in partial:  # a cut receive holds only part of what the file server has; it blocks writes
        steps.append((f"zfs receive -A {d} (a cut receive: the file server holds all of it)", partial_fn(host.abort, d)))
    mounted = host.values(job.target, ["mounted"], recursive=job.recursive)
    for d in sorted(tree, key=lambda d: (-d.count("/"), d)):  # the changes are made unmounted (zfs-fuse
        if mounted.get(d, {}).get("mounted") == "yes":      # takes readonly=off only at a mount)
            steps.append((f"zfs unmount {d}", partial_fn(host.unmount, d)))
    steps.append((f"zfs set {MARK}={since} {job.target}", partial_fn(host.set, job.target, MARK, since)))
    if mountpoint_root is not None:
        steps.append((f"zfs set mountpoint={mountpoint_root} {job.target}",
                      partial_fn(host.set, job.target, "mountpoint", mountpoint_root)))
    for d in tree:  # (always: a mount may hold a "temporary" readonly that the property hides, zfs-fuse's)
        steps.append((f"zfs set readonly=off {d}", partial_fn(host.set, d, "readonly", "off")))
    for d in tree:
        steps.append((f"zfs mount {d}", partial_fn(host.mount, d)))
    if dry_run:
        rep.planned = [s[0] for s in steps]
        return rep
    assert conn is not None
    if old is None:  # a new failover: an earlier failback's record is history
        state.set_record(conn, state.failback_key(job.name), None)
    state.set_record(conn, record_key(job.name), {"since": since, "target": job.target, "was": was,
                                                   "mountpoint_root": mountpoint_root, "at": time.time()})
    for _shown, do in steps:
        do()
    after = host.values(job.target, ["mountpoint", "mounted", "type"], recursive=job.recursive)
    rep.datasets = [{"name": d, "mountpoint": after.get(d, {}).get("mountpoint", ""),
                     "mounted": after.get(d, {}).get("mounted") == "yes"} for d in tree]
    if partial:
        rep.notes.append(f"{len(partial)} cut receive(s) forgotten (zfs receive -A): the file server holds them whole")
    rep.notes.append("the gate refuses every receive into these datasets, and a pull run of the job refuses, "
                     f"until `rebal failback {job.name}`")
    return rep


def status(job: Replicate, conn: sqlite3.Connection | None) -> dict:
    """Where the job stands: failed over (since when, the record) or not, and a failback's record."""
    from .. import state

    host = backup_here(job)
    rec = state.record(conn, record_key(job.name)) if conn is not None else None
    back = state.record(conn, state.failback_key(job.name)) if conn is not None else None
    return {"job": job.name, "target": job.target, "failed_over": marked(host, job.target) is not None,
            "since": (rec or {}).get("since"), "mountpoint_root": (rec or {}).get("mountpoint_root"),
            "failback": back}
