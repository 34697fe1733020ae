"""`rebal heal POOL`: repair the files `zpool status -v` lists as permanently damaged, from the backup.

A block that a snapshot holds, with the same snapshot (same guid) on the backup, is rewritten in place
by a corrective receive: `zfs send BACKUP@SNAP` on the backup's host into `zfs receive -c POOL/DS@SNAP`
on the source's (OpenZFS 2.2+). A live file unchanged since that snapshot shares its blocks, so it is
healed with it. Then an error scrub (`zpool scrub -e`, else a scrub) and `zpool status -v` again say
what is healed. What was written after the newest replicated snapshot is in no stream: such a file is
reported restorable (the backup's copy, how old) or lost, and with ``restore_to`` its backup copy is put
beside it in that directory, never over the live file. Nothing is destroyed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

from ..config import Config, Replicate
from ..errors import RebalError, UsageError
from ..zfs.damage import Damaged, in_dataset, permanent_errors
from ..zfs.host import ZfsHost
from ..zfs.snaps import Snap
from ..replicate.job import connect
from ..replicate.sides import job_hosts
from ..replicate.stream import StreamFailed, Transfer
from ..transport import Wire


class HealError(RebalError):
    pass


@dataclass
class FileHeal:
    entry: str
    dataset: str | None
    path: str | None
    state: str = ""  # healed, restorable, lost (or, in a dry run, would-heal)
    source: str = ""  # the snapshot it was (or would be) healed from, or is restorable from
    age_hours: float | None = None  # of that snapshot
    restored_to: str = ""
    note: str = ""


@dataclass
class HealReport:
    pool: str
    jobs: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)  # the permanent-error entries before
    after: list[str] = field(default_factory=list)  # and after the heal's scrub
    files: list[FileHeal] = field(default_factory=list)
    corrected: list[str] = field(default_factory=list)  # DS@SNAP healed by corrective receives
    scrub: str = ""
    bytes: int = 0
    planned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def unhealed(self) -> list[FileHeal]:
        return [f for f in self.files if f.state not in ("healed", "would heal")]


def _covers(j: Replicate, ds: str) -> bool:
    return ds == j.source or (j.recursive and ds.startswith(j.source + "/"))


def jobs_of(cfg: Config, pool: str, job: str | None) -> list[Replicate]:
    if job is not None:
        j = cfg.job(job)
        if j is None:
            raise UsageError(f"no replication job named {job!r}")
        if j.mode != "zfs" or not (j.source == pool or j.source.startswith(pool + "/")):
            raise UsageError(f"job {job} does not back up pool {pool} by zfs send (heal needs a zfs-mode job of it)")
        return [j]
    found = [j for j in cfg.replicate if j.mode == "zfs" and (j.source == pool or j.source.startswith(pool + "/"))]
    if not found:
        raise UsageError(f"no zfs-mode replication job backs up pool {pool}: nothing to heal from")
    return found


class Heal:
    def __init__(self, pool: str, jobs: list[Replicate], links: Callable[[Replicate], Wire], *, dry_run: bool = False,
                 stop: threading.Event | None = None,
                 restore_to: str | None = None) -> None:
        """``links``: each job's own link to its other end (two jobs may back the pool up to two hosts)."""
        self.pool, self.jobs, self.links = pool, jobs, links
        self.here, _ = job_hosts(jobs[0], links(jobs[0]))  # the pool is on the source's host
        self.dry_run, self.stop, self.restore_to = dry_run, stop, restore_to
        self.report = HealReport(pool, [j.name for j in jobs])

    def job_of(self, ds: str) -> Replicate | None:
        return max((j for j in self.jobs if _covers(j, ds)), key=lambda j: len(j.source), default=None)

    def run(self) -> HealReport:
        found = self._damaged()
        self.report.before = [d.entry for d in found]
        if not found:
            self.report.notes.append("no permanent errors: nothing to heal")
            return self.report
        if not self.here.abilities().corrective:
            raise HealError(f"{self.here.where}: this ZFS has no corrective receive (zfs receive -c, OpenZFS 2.2+); "
                            f"rebal restore JOB --path FILE gets a damaged file's backup copy instead")
        plan = self._plan(found)
        for (ds, snap), (j, backup, bsnap) in plan.items():
            self._correct(j, backup, ds, snap, bsnap)
        if not self.dry_run and self.report.corrected:
            self.report.scrub = self.here.scrub(self.pool, errors_only=True)
            self.here.wait_scrub(self.pool)
            self.report.after = [d.entry for d in self._damaged()]
        elif not self.dry_run:
            self.report.after = list(self.report.before)
        self._judge(found, plan)
        return self.report

    def _damaged(self) -> list[Damaged]:
        mounts = self.here.mounts(self.pool)
        return [in_dataset(d, mounts) for d in permanent_errors(self.here.status_v(self.pool))]

    def _plan(self, found: list[Damaged]) -> dict[tuple[str, str], tuple[Replicate, ZfsHost, str]]:
        """(dataset, its snapshot to heal) -> (job, the backup's host, the backup's snapshot of the same guid)."""
        plan = {}
        self.common: dict[str, list[tuple[Snap, str]]] = {}
        for d in found:
            j = self.job_of(d.dataset) if d.dataset else None
            if j is None or d.dataset is None:
                continue
            _, backup = job_hosts(j, self.links(j))  # that job's backup, on its own host
            if d.dataset not in self.common:
                self.common[d.dataset] = self._common(j, backup, d.dataset)
            common = self.common[d.dataset]
            # the snapshot an entry names; a live file's damaged block that a snapshot shares is listed in
            # that snapshot too (OpenZFS 2.2+ names every dataset that holds a damaged block), so a live
            # entry alone is a block written after every snapshot: no stream has it
            for snap, bsnap in [c for c in common if d.snapshot and c[0].name == d.snapshot]:
                plan[(d.dataset, snap.name)] = (j, backup, f"{j.target + d.dataset[len(j.source):]}@{bsnap}")
        return plan

    def _common(self, j: Replicate, backup: ZfsHost, ds: str) -> list[tuple[Snap, str]]:
        """The dataset's snapshots that the backup holds too (by guid), newest first, with the backup's name."""
        mine = self.here.tree(ds, recursive=False)
        theirs = backup.tree(j.target + ds[len(j.source):], recursive=False)
        if mine is None or theirs is None:
            return []
        by_guid = {s.guid: s.name for snaps in theirs.snaps.values() for s in snaps if not s.bookmark}
        snaps = [s for s in mine.snaps.get(ds, []) if not s.bookmark and s.guid in by_guid]
        return [(s, by_guid[s.guid]) for s in sorted(snaps, key=lambda s: -s.txg)]

    def _correct(self, j: Replicate, backup: ZfsHost, ds: str, snap: str, bsnap: str) -> None:
        # a corrective receive takes the blocks as the backup stores them: raw where the job is, no -c/-e
        flags = ["-w"] if j.raw else (["-L"] if backup.abilities().large_blocks else [])
        t = Transfer(backup, self.here, j, self.links(j), stop=self.stop, notes=self.report.notes)
        send = t.send(bsnap, flags=flags)
        recv = self.here.receive(f"{ds}@{snap}", corrective=True)
        if self.dry_run:
            self.report.planned.append(t.line(send, recv))
            return
        try:
            res = t.run(send, recv, what=f"the corrective receive of {ds}@{snap}")
        except StreamFailed as e:
            self.report.bytes += e.result.bytes
            self.report.notes.append(str(e)[-300:])
            return
        self.report.bytes += res.bytes
        self.report.corrected.append(f"{ds}@{snap}")

    def _judge(self, found: list[Damaged], plan: dict) -> None:
        after = set(self.report.after)
        for d in found:
            f = FileHeal(d.entry, d.dataset, d.path)
            self.report.files.append(f)
            named = {e.snapshot for e in found if e.key == d.key and e.snapshot} if d.snapshot is None else {d.snapshot}
            healed_from = [snap for (ds, snap) in plan if ds == d.dataset and snap in named]
            if self.dry_run:
                f.state = "would heal" if healed_from else "restorable"
                f.source = healed_from[0] if healed_from else ""
            elif d.entry not in after:
                f.state, f.source = "healed", (healed_from[0] if healed_from else "")
                if not healed_from:
                    f.note = "not listed after the scrub (the error was not seen again)"
            else:
                f.state = "restorable"
            if f.state == "restorable":
                self._restorable(d, f)

    def _restorable(self, d: Damaged, f: FileHeal) -> None:
        if d.metadata or d.dataset is None:
            f.state, f.note = "lost", "pool metadata: no send stream carries it" if d.metadata else \
                "an object of a dataset zfs no longer names"
            return
        common = self.common.get(d.dataset) or []
        if not common or d.path is None:
            f.state = "lost"
            f.note = "no snapshot of it on the backup" if not common else f"object {d.object}: no path to restore"
            return
        newest = common[0][0]
        f.source = newest.name
        created = self.here.props(f"{d.dataset}@{newest.name}", ["creation"]).get("creation", {}).get("value", "")
        f.age_hours = round((time.time() - int(created)) / 3600, 1) if created.isdigit() else None
        f.note = ("written after the newest replicated snapshot: the backup has it as it was then"
                  if d.snapshot is None else "in a snapshot the backup does not hold")
        if self.restore_to and not self.dry_run and d.snapshot is None:
            from .restore import RestoreError, RestoreRefused

            try:
                f.restored_to = self._restore_beside(d, newest.name)
            except RestoreRefused as e:  # its copy is there already: kept, not overwritten
                f.note += f"; not put aside: {e}"
            except RestoreError as e:  # a file made after that snapshot: the backup has no copy of it
                f.state, f.note = "lost", f"the backup has no copy of it: {e}"

    def _restore_beside(self, d: Damaged, point: str) -> str:
        from .restore import RestorePoint, RestoreRefused, restore_path

        j = self.job_of(d.dataset) if d.dataset else None
        if j is None or d.dataset is None or d.path is None or self.restore_to is None:
            raise RestoreRefused(f"no job of this pool covers {d.dataset or d.entry}")
        rel = (d.dataset[len(j.source):] + d.path).lstrip("/")
        rep = restore_path(j, self.links(j), RestorePoint(point, None), rel, self.restore_to, stop=self.stop)
        return rep.to


def heal(cfg: Config, pool: str, *, job: str | None = None, dry_run: bool = False, restore_to: str | None = None,
         stop: threading.Event | None = None) -> HealReport:
    from .. import names, state
    from ..outcome import Outcome
    from ..recorded import recorded

    names.pool(pool)
    from ..errors import NoSuchPool

    # the pool is on this host for a push job (the usual case): not there is no such pool (README:
    # exit 5), said before anything is recorded
    here = ZfsHost.here().has_pool(pool)
    try:
        jobs = jobs_of(cfg, pool, job)
    except UsageError:
        if not here:
            raise NoSuchPool(f"no such pool: {pool}") from None
        raise
    if not here and all(j.direction == "push" for j in jobs):
        raise NoSuchPool(f"no such pool: {pool}")
    conn = None if dry_run else state.connect(cfg.state_db)
    with recorded(conn, "heal", job=",".join(j.name for j in jobs), pool=pool, dry_run=dry_run) as run:
        with ExitStack() as opened:
            links: dict[str, Wire] = {}

            def link_of(j: Replicate) -> Wire:  # each job's own, opened when first needed
                if j.name not in links:
                    w = connect(j)
                    opened.push(w)  # closed with the others (its __enter__ is itself)
                    links[j.name] = w
                return links[j.name]

            rep = Heal(pool, jobs, link_of, dry_run=dry_run, stop=stop, restore_to=restore_to).run()
        run.outcome = Outcome.FAILED if rep.unhealed else Outcome.OK
        run.details = asdict(rep)
    return rep
