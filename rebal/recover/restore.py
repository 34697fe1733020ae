"""Getting data back from the backup host: the restore points of a job, a whole dataset by
`zfs send | zfs receive` into a NEW dataset, or one file or directory by rsync, keeping metadata."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .. import names
from ..config import Replicate
from ..errors import RebalError, UsageError
from ..process.command import run
from ..replicate.policy import parse_snapshot_name
from ..replicate.rsync import PARTIAL_DIR
from ..zfs.snapview import SnapView
from ..transport import Wire, classify_ssh


class RestoreError(RebalError):
    pass


class PointNotFound(RestoreError):
    """No such restore point, or the path is not in it: bad input (exit 2), as the README says."""

    exit_code = 2


class RestoreRefused(RestoreError):
    """A restore that would overwrite data without --force: refused, like every refusal (exit 2)."""

    exit_code = 2


@dataclass
class RestorePoint:
    name: str  # snapshot name (after @), or "current" for an rsync target without versions
    created: float | None
    referenced: int | None = None
    used: int | None = None
    guid: int | None = None

    def as_dict(self) -> dict:
        when = datetime.fromtimestamp(self.created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if self.created else None
        return {"name": self.name, "created": when, "referenced": self.referenced, "used": self.used}


def _remote_dataset_of(ssh: Wire, path: str) -> str | None:
    """The backup host's file system mounted where ``path`` lies (the longest mount point that holds it)."""
    from ..zfs.host import ZfsHost

    best = None
    for name, mp in ZfsHost(ssh).filesystems().items():
        if mp.startswith("/") and (path == mp or path.startswith(mp.rstrip("/") + "/")):
            if best is None or len(mp) > len(best[1]):
                best = (name, mp)
    return best[0] if best else None


def points(job: Replicate, ssh: Wire) -> tuple[str | None, list[RestorePoint]]:
    """(dataset on the backup host, its restore points oldest first)."""
    from ..zfs.host import HostError
    from ..replicate.sides import backup_link, job_hosts

    backup = job_hosts(job, ssh)[1]  # the backup's host (here, for a pull job)
    ds = job.target if job.mode == "zfs" else _remote_dataset_of(backup_link(job, ssh), job.target)
    out: list[RestorePoint] = []
    if ds:
        try:
            info = backup.snapshot_info(ds)
        except HostError as e:
            raise RestoreError(f"backup host: {e}") from None
        if info is None and job.mode == "zfs":
            raise RestoreError(f"no restore point: the backup host has no {ds} yet "
                               f"(rebal replicate {job.name} makes the first)")
        for name, props in (info or {}).items():
            out.append(RestorePoint(name.split("@", 1)[1], props.get("creation"), props.get("referenced"),
                                    props.get("used"), props.get("guid")))
    out.sort(key=lambda p: (p.created or 0, p.name))
    if job.mode == "rsync":
        out.append(RestorePoint("current", None))
    return ds, out


def choose(pts: list[RestorePoint], at: str) -> RestorePoint:
    real = [p for p in pts if p.name != "current"]
    if at == "latest":
        if real:
            return real[-1]
        if pts:
            return pts[-1]
        raise RestoreError("the backup host has no restore point of this job")
    at = at.split("@", 1)[-1]
    for p in pts:
        if p.name == at:
            return p
    want = parse_snapshot_name(at)
    if want and real:
        near = sorted(real, key=lambda p: abs((p.created or 0) - want[1].timestamp()))[:5]
    else:
        near = real[-5:]
    listing = ", ".join(p.name for p in near) or "none"
    raise PointNotFound(f"no restore point @{at} on the backup host; nearest: {listing} (rebal backups JOB lists all)")


@dataclass
class RestoreReport:
    kind: str  # dataset, path
    point: str
    to: str
    bytes: int = 0
    notes: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)


def restore_dataset(job: Replicate, ssh: Wire, point: RestorePoint, to: str, *, force: bool = False,
                    dry_run: bool = False, stop: threading.Event | None = None,
                    progress: Callable[[int], None] | None = None) -> RestoreReport:
    """`zfs send TARGET@SNAP` on the backup's host into `zfs receive` of a new dataset on the source's
    (the hosts of a replication, swapped)."""
    from ..zfs.host import HostError
    from ..replicate.sides import job_hosts

    if job.mode != "zfs":
        raise UsageError("a whole-dataset restore needs a zfs-mode job; use --path for an rsync job")
    names.dataset(to)
    into, frm = job_hosts(job, ssh)
    rep = RestoreReport("dataset", point.name, to)
    exists = into.exists(to)
    token = into.token(to) if exists else None
    if exists and token is None:
        if to == job.source and not force:
            raise RestoreRefused(f"{to} is the live source of job {job.name}: restoring onto it destroys what is there. "
                               "Restore into a new dataset, or pass --force to overwrite it")
        if not force:
            raise RestoreRefused(f"{to} exists; restore into a new dataset name (or --force to overwrite it)")
    from ..replicate.stream import StreamFailed, Transfer

    try:  # the replication's stream, the hosts swapped: the job's flags (raw: the backup has no key) and filters
        t = Transfer(frm, into, job, ssh, bwlimit=job.bwlimit, stop=stop, notes=rep.notes)
        send = t.send(f"{job.target}@{point.name}", token=token)
        recv = into.receive(to, force=exists and not token)
    except HostError as e:
        raise RestoreError(str(e)) from None
    if token:
        rep.notes.append("an interrupted restore into this dataset is resumed")
    if dry_run:
        rep.planned.append(t.line(send, recv))
        return rep
    try:
        res = t.run(send, recv, progress=progress, what=f"restore of @{point.name} into {to}")
    except StreamFailed as e:
        raise RestoreError(str(e)) from None
    rep.bytes = res.bytes
    if job.raw:
        rep.notes.append(f"received raw (encrypted, as the backup holds it): zfs load-key {to}, then zfs mount {to}")
    return rep


def path_dest(path: str, to: str, force: bool) -> tuple[str, str]:
    """(the path inside the backup, where it lands): bad input and an existing destination refused
    here, before anything reaches the backup host."""
    rel = os.path.normpath(path.lstrip("/"))
    if rel.startswith("..") or rel in (".", ""):
        raise UsageError(f"--path {path!r}: give a path inside the backup, like home/alice/report.odt")
    dest = os.path.join(to, os.path.basename(rel))
    if os.path.lexists(dest) and not force:
        raise RestoreRefused(f"{dest} exists: not overwritten (--force to overwrite, or restore --to elsewhere)")
    return rel, dest


def restore_path(job: Replicate, ssh: Wire, point: RestorePoint, path: str, to: str, *, force: bool = False,
                 dry_run: bool = False, stop: threading.Event | None = None) -> RestoreReport:
    """One file or directory from a restore point, by rsync over ssh, into the directory ``to``.
    ``ssh`` reaches the job's other end; the backup is read on the backup's host, which is this one
    for a pull job (then rsync copies here)."""
    from ..zfs.host import ZfsHost
    from ..replicate.sides import backup_link, job_hosts

    backup: ZfsHost = job_hosts(job, ssh)[1]
    ssh = backup_link(job, ssh)
    rel, dest = path_dest(path, to, force)
    rep = RestoreReport("path", point.name, dest)
    shown = f"{rel} (@{point.name})"
    if point.name == "current":
        return _rsync_back(ssh, os.path.join(job.target, rel), to, rep, dry_run, stop, shown=rel)
    holder, sub, nested = _datasets_of(job, ssh, rel)
    if not _has_snapshot(ssh, holder, point.name):
        raise PointNotFound(f"{shown}: not in this restore point (the backup's {holder} has no @{point.name}: "
                            "it came into the job after that point)")
    with SnapView(backup, holder, point.name, f"restore-{job.name}", rep.notes) as view:
        if sub:
            _rsync_back(ssh, os.path.join(view, sub), to, rep, dry_run, stop, shown=shown)
        else:  # the path is a dataset's root: its view has a temporary name
            _rsync_back(ssh, view, to, rep, dry_run, stop, shown=shown, name=os.path.basename(rel))
    # a directory that holds child datasets: each child's files come from its own snapshot, into
    # its place under the restored directory (parents first, so a child's directory exists)
    for ds, inner in nested:
        if not _has_snapshot(ssh, ds, point.name):
            rep.notes.append(f"{os.path.join(rel, inner)}: the backup's {ds} has no @{point.name} (it came into "
                             "the job later): left empty")
            continue
        into = os.path.dirname(os.path.join(dest, inner))
        with SnapView(backup, ds, point.name, f"restore-{job.name}", rep.notes) as view:
            sub_rep = RestoreReport("path", point.name, into)
            _rsync_back(ssh, view, into, sub_rep, dry_run, stop, shown=f"{os.path.join(rel, inner)} (@{point.name})",
                        name=os.path.basename(inner))
            rep.bytes += sub_rep.bytes
            rep.planned += sub_rep.planned
    return rep


def _has_snapshot(ssh: Wire, ds: str, snap: str) -> bool:
    from ..zfs.host import ZfsHost

    return ZfsHost(ssh).exists(f"{ds}@{snap}")


def _datasets_of(job: Replicate, ssh: Wire, rel: str) -> tuple[str, str, list[tuple[str, str]]]:
    """Where ``rel`` (a path relative to the job's source) lies on the backup host: (the dataset
    that holds it, the path inside that dataset, [(each dataset below the path, its place relative
    to the path)], parents first). In a recursive job a path may lie in a child dataset, whose
    files are not in the parent's snapshot (only its empty mount point is)."""
    from ..zfs.host import HostError, ZfsHost

    host = ZfsHost(ssh)
    try:
        listed = host.filesystems(job.target if job.mode == "zfs" else None)
    except HostError as e:
        raise RestoreError(f"backup host: {e}") from None
    if job.mode == "zfs":
        # a child's place is its name below the target (received children inherit their mount points)
        roots = {name: "/" + name[len(job.target) + 1:] for name in listed
                 if name == job.target or name.startswith(job.target + "/")}
        full = os.path.join("/", rel)
    else:
        roots = {name: mp for name, mp in listed.items() if mp.startswith("/")}
        full = os.path.join(os.path.normpath(job.target), rel)

    def holds(root: str) -> bool:
        return root == "/" or full == root or full.startswith(root.rstrip("/") + "/")

    holding = [n for n, root in roots.items() if holds(root)]
    if not holding:
        raise RestoreError("the rsync target is not on a ZFS dataset: only the current copy can be restored")
    holder = max(holding, key=lambda n: len(roots[n]))
    sub = os.path.relpath(full, roots[holder])
    nested = sorted(((n, os.path.relpath(root, full)) for n, root in roots.items() if root.startswith(full + "/")),
                    key=lambda x: x[1].count("/"))
    return holder, "" if sub == "." else sub, nested


def _rsync_back(ssh: Wire, remote_path: str, to: str, rep: RestoreReport, dry_run: bool,
                stop: threading.Event | None, *,
                shown: str, name: str | None = None) -> RestoreReport:
    """rsync ``remote_path`` back into ``to`` (as ``to/name`` where a name is given: a view's own
    name is a temporary one); errors name ``shown`` (what the admin asked for), never the view."""
    src = remote_path.rstrip("/") + ("/" if name else "")
    dst = to.rstrip("/") + "/" + (name + "/" if name else "")
    # a cut rsync run's partial files are rebal's, not the data: never brought back
    argv = ["rsync", "-aHAX", "--numeric-ids", "--protect-args", "--mkpath", "--stats", f"--exclude={PARTIAL_DIR}/",
            *ssh.rsync_remote(), ssh.rsync_path(src), dst]
    if dry_run:
        rep.planned.append(" ".join(argv[:7] + argv[-2:]))
        return rep
    res = run(argv, stop=stop or threading.Event(), timeout=None, check=False)
    rc, text, etext = res.returncode, res.stdout, res.stderr
    if rc == 255:
        raise classify_ssh(ssh.ep, etext)
    if rc == 23 and "No such file or directory" in etext:
        raise PointNotFound(f"{shown}: not in this restore point")
    if rc != 0:
        raise RestoreError(f"rsync of {shown} from the backup host failed (exit {rc}): "
                           f"{etext.replace(remote_path, shown).strip()[-300:]}")
    from ..replicate.rsync import parse_stats

    rep.bytes = parse_stats(text).get("bytes_expected", 0)
    return rep
