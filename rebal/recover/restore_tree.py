"""A whole tree back from the backup: `rebal restore JOB --all --to POOL[/PATH]`.

A restore is a replication with the two hosts swapped: the backup's host sends, the source's host
receives (`host.ZfsHost` on each side, whichever end rebal runs on). A tree's restore point is per
dataset: a run snapshots only the datasets with something written, so their newest snapshots have
different names. Each dataset is sent whole at its own point (``pick``: with `--at latest` its newest
backup; with `--at NAME` its newest at or before NAME's time), with the job's raw and compression
flags, parents before children, into the same place under ``to``; the report names each dataset's
snapshot. The snapshots keep their guids: restored under the job's own source names at `latest`,
the next `rebal replicate JOB` finds each dataset's point on both sides and goes on incrementally. A cut restore is resumed by the next run (receive tokens), and
a dataset already restored at the point is left as it is, so running the command again finishes it.

Nothing is overwritten: a destination dataset that exists is refused (a pool's empty root, made by
`zpool create`, is received over: it holds nothing), and rebal never destroys anything here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass, field
from functools import partial

from ..config import Replicate
from ..outcome import Outcome
from ..zfs.host import HostError, Tree
from ..zfs.snaps import Snap
from ..replicate.policy import parse_snapshot_name
from .restore import PointNotFound, RestoreError, RestorePoint, RestoreRefused
from ..replicate.sides import job_hosts
from ..replicate.stream import StreamFailed, Transfer, counted
from ..transport import TransportError, Wire



@dataclass
class DatasetRestore:
    source: str  # on the backup host
    target: str  # here (or on the source's host)
    kind: str = ""  # full, resumed, present (restored before), missing (no such point), failed
    bytes: int = 0
    error: str = ""
    point: str = ""  # the snapshot it came from
    newer: str = ""  # the backup's newest snapshot of it, where that is newer than ``point``


def _when(name: str) -> float | None:
    p = parse_snapshot_name(name)
    return p[1].timestamp() if p else None


def pick(snaps: list[Snap], point: RestorePoint, latest: bool) -> str | None:
    """A dataset's restore point: its newest snapshot (``latest``), else ``point`` itself where it
    has it, else its newest snapshot made at or before ``point`` (by the time in rebal's names, or
    the point's creation)."""
    ordered = [s for s in sorted(snaps, key=lambda s: s.txg) if not s.bookmark]
    if not ordered:
        return None
    if latest:
        return ordered[-1].name
    if any(s.name == point.name for s in ordered):
        return point.name
    t = _when(point.name) or point.created
    if t is None:
        return None
    best = None
    for s in ordered:
        ts = _when(s.name)
        if ts is not None and ts <= t:
            best = s.name
    return best


@dataclass
class TreeReport:
    kind: str
    point: str
    to: str
    bytes: int = 0
    datasets: list[DatasetRestore] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[DatasetRestore]:
        return [d for d in self.datasets if d.kind == Outcome.FAILED]


def _below(root: str, name: str) -> bool:
    return name == root or name.startswith(root + "/")


class TreeRestore:
    def __init__(self, job: Replicate, link: Wire, point: RestorePoint, to: str, *, dry_run: bool = False,
                 stop: threading.Event | None = None, progress: Callable[[int], None] | None = None,
                 key_location: str | None = None, latest: bool = False) -> None:
        self.job, self.link, self.point, self.to = job, link, point, to
        self.into, self.frm = job_hosts(job, link)  # swapped: the backup sends, the source receives
        self.dry_run, self.stop, self.progress = dry_run, stop or threading.Event(), progress
        self.report = TreeReport("tree", point.name, to)
        self._transfer: Transfer | None = None
        self.key_location = key_location
        self.latest = latest
        self.points: dict[str, str | None] = {}  # backup dataset -> the snapshot it is restored from
        self._done = 0

    def target_of(self, ds: str) -> str:
        return self.to + ds[len(self.job.target):]

    def run(self) -> TreeReport:
        if self.job.mode != "zfs":
            raise RestoreError("a whole-tree restore needs a zfs-mode job; use --path for an rsync job")
        backup = self.frm.tree(self.job.target, recursive=self.job.recursive)
        if backup is None or not backup.snaps:
            raise RestoreError(f"the backup host has no {self.job.target} yet (rebal replicate {self.job.name} makes it)")
        order = sorted((d for d in backup.snaps if _below(self.job.target, d)), key=lambda d: (d.count("/"), d))
        self.points = {d: pick(backup.snaps[d], self.point, self.latest) for d in order}
        if self.points.get(self.job.target) is None:
            raise PointNotFound(f"the backup's {self.job.target} has no snapshot at or before @{self.point.name}")
        here = self.into.tree(self.to, tokens=True) or Tree()
        self._check_destination(here)
        skipped: list[str] = []
        for ds in order:
            rep = DatasetRestore(ds, self.target_of(ds))
            self.report.datasets.append(rep)
            if self.stop.is_set():  # (a failure: the run is not reported done, the next one goes on)
                rep.kind, rep.error = Outcome.FAILED, "stopped before it began; the same command again restores it"
                continue
            if any(_below(s, ds) for s in skipped):
                rep.kind, rep.error = "missing", "its parent was not restored"
                skipped.append(ds)
                continue
            at = self.points.get(ds)
            if at is None:
                rep.kind = "missing"
                rep.error = f"no snapshot at or before @{self.point.name} on the backup (it came into the job after that point)"
                skipped.append(ds)
                continue
            rep.point = at
            newest = pick(backup.snaps[ds], self.point, True)
            if newest != at:
                rep.newer = newest or ""
            self._one(rep, backup, here)
            if rep.kind == Outcome.FAILED:
                skipped.append(ds)
        self.report.bytes = sum(d.bytes for d in self.report.datasets)
        missing = [d for d in self.report.datasets if d.kind == "missing"]
        if missing:
            self.report.notes.append(f"{len(missing)} dataset(s) not restored: " + "; ".join(
                f"{d.source}: {d.error}" for d in missing[:5]))
        older = [d for d in self.report.datasets if d.newer]
        if older:
            self.report.warnings.append(
                f"{len(older)} dataset(s) restored from an older snapshot than their newest backup, as asked "
                f"(--at {self.point.name}): " + "; ".join(f"{d.target} from @{d.point}, the backup holds @{d.newer}"
                                                            for d in older[:5]) +
                ". Their next replication stops as diverged and destroys nothing; the newer backups stay")
        self.report.notes.append("properties other than encryption are not in the backup's streams (rebal sends "
                                 "without -p): the restored datasets have their defaults, inherited from " + self.to)
        if self.job.raw and not self.dry_run:
            self._one_root()
        return self.report

    def _one_root(self) -> None:
        """A raw receive makes every encrypted dataset its own encryption root. With the key's location
        (``key_location``) each key is loaded and a child whose parent is encrypted inherits its
        parent's root again (`zfs change-key -i`), as on the source; without it, say what to run."""
        done = [d.target for d in self.report.datasets if d.kind in ("full", "resumed", "present")]
        try:
            crypt = self.into.values(self.to, ["encryption", "encryptionroot", "keystatus"]) if done else {}
        except HostError:  # a ZFS without native encryption
            return
        enc = [d for d in done if crypt.get(d, {}).get("encryption", "off") not in ("off", "-", "")]
        if not enc:
            return
        children = [d for d in enc if d != self.to and d.rsplit("/", 1)[0] in enc
                    and crypt[d].get("encryptionroot") == d]
        if not self.key_location:
            self.report.notes.append(f"{len(enc)} dataset(s) are encrypted, each its own encryption root after a raw "
                                     f"receive; with --key-location URI (the key's keylocation) rebal loads the keys "
                                     f"and makes the {len(children)} child(ren) inherit their parent's root again")
            return
        for ds in sorted(enc, key=lambda d: d.count("/")):
            if crypt[ds].get("keystatus") != "available":
                res = self.into.load_key(ds, self.key_location)
                if res.returncode != 0:
                    raise RestoreError(f"{ds}: zfs load-key -L {self.key_location}: {res.stderr.strip()}")
            if ds in children:
                self.into.change_key_inherit(ds)
            if crypt[ds].get("encryptionroot") == ds and ds not in children:
                self.into.set(ds, "keylocation", self.key_location)
            self.into.mount(ds)
        self.report.notes.append(f"keys loaded from {self.key_location}; {len(children)} child(ren) inherit their "
                                 "parent's encryption root again (zfs change-key -i)")

    def _check_destination(self, here: Tree) -> None:
        """Refuse before anything moves: the destination's parent must exist; an existing dataset under
        ``to`` is only received into when it is a partial receive (resumed), already holds the point
        (left), or is the empty root of a new pool."""
        parent = self.to.rsplit("/", 1)[0] if "/" in self.to else None
        if parent and not self.into.exists(parent):
            raise RestoreRefused(f"{parent} does not exist on {self.into.where}: create it (or the pool) first")
        for ds, snaps in here.snaps.items():
            src = self.job.target + ds[len(self.to):]
            at = self.points.get(src) if src else None
            if ds in here.tokens or (at is not None and here.has(ds, at)):
                continue
            if ds == self.to and "/" not in ds and not snaps and len(here.snaps) == 1 and self.into.holds_nothing(ds):
                continue  # a new pool's root: received over with -F (it holds nothing)
            raise RestoreRefused(f"{ds} exists on {self.into.where}{' (' + src + ' restores there)' if src else ''}: "
                                 "nothing is overwritten. Restore --to a new name, or destroy it yourself first")

    def _one(self, rep: DatasetRestore, backup: Tree, here: Tree) -> None:
        target = rep.target
        want = backup.guid(rep.source, rep.point)
        if here.guid(target, rep.point) == want:
            rep.kind = "present"  # restored by an earlier run
            return
        token = here.tokens.get(target)
        if self._transfer is None:  # the replication's stream, the hosts swapped (asked once per run)
            self._transfer = Transfer(self.frm, self.into, self.job, self.link, bwlimit=self.job.bwlimit,
                                      stop=self.stop, notes=self.report.notes)
        t = self._transfer
        send = t.send(f"{rep.source}@{rep.point}", token=token)
        rep.kind = "resumed" if token else "full"
        force = target == self.to and target in here.snaps and not token  # the new pool's empty root
        recv = self.into.receive(target, force=force)
        if self.dry_run:
            self.report.planned.append(t.line(send, recv))
            return
        try:
            res = t.run(send, recv, progress=counted(partial(setattr, rep, "bytes"), self._done, self.progress))
        except StreamFailed as e:
            res = e.result
            rep.kind = Outcome.FAILED
            if res.stopped:
                rep.error = "stopped; the next run resumes it" if self.into.abilities().resumable else "stopped by request"
            else:
                rep.error = res.said[-300:]
        except TransportError as e:
            res, rep.kind, rep.error = None, Outcome.FAILED, str(e)
        rep.bytes = res.bytes if res is not None else rep.bytes
        self._done += rep.bytes


def restore_tree(job: Replicate, link: Wire, point: RestorePoint, to: str, **kw: Any) -> TreeReport:
    from .. import names

    names.dataset(to)
    try:
        rep = TreeRestore(job, link, point, to, **kw).run()
    except HostError as e:
        raise RestoreError(str(e)) from None
    if rep.failed:
        raise TreeRestoreFailed(rep)
    return rep


class TreeRestoreFailed(RestoreError):
    def __init__(self, rep: TreeReport) -> None:
        self.report = rep
        first = rep.failed[0]
        super().__init__(f"{len(rep.failed)} of {len(rep.datasets)} dataset(s) not restored; {first.target}: "
                         f"{first.error}. Run the same command again: what is restored stays, a cut receive resumes")
