"""The file server back: `rebal failback JOB`, on the backup host, after `rebal failover JOB`.

1. The backup is frozen (readonly=on on each dataset) and snapshotted at once (`-r`), under the
   job's own snapshot name: that snapshot is the next replication's base on both sides.
2. Per dataset, parents first, on the file server: the newest snapshot it shares with the backup (by
   guid) is the base. What the file server wrote after it (its snapshots after the base, and
   `written@base`) is kept: a snapshot `rebal-diverged-T` of it, received beside the pool's data as a
   read-only clone of the base (`POOL/rebal-diverged-T/...`, only the diverged blocks), checked by
   guid, before the dataset is rolled back to the base (`--discard-diverged`: not kept). Then the
   backup's changes since the base are sent to it, incrementally, resumable, through the
   replication's own stream (`Transfer`); a dataset made on the backup during the failover is sent
   whole.
3. Once every dataset is back: the backup datasets are unmounted, their mount points and readonly as
   they were before the failover, the mark removed; the next `rebal replicate JOB` goes on
   incrementally from the failback's snapshot.

Every step looks at what is there before it acts, so the same command finishes a cut failback (a
cut send resumes from its receive token). The file server needs a snapshot in common with the backup:
on a ZFS with bookmarks the source keeps only a bookmark of its last replication unless the job has
``keep_base = true``; without it such a dataset is refused, with the way out.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from datetime import datetime, timezone
from functools import partial

from ..config import Config, Replicate
from ..errors import HostError, RebalError
from ..outcome import Outcome
from ..replicate.policy import snapshot_name
from ..replicate.sides import job_hosts
from ..replicate.stream import StreamFailed, Transfer, counted
from ..transport import TransportError, Wire
from ..units import human
from ..zfs.snaps import Snap, Tree
from .failover import MARK, FailoverRefused, backup_here, marked, record_key as over_key

DIVERGED = "rebal-diverged"


def record_key(job: str) -> str:
    from ..state import failback_key

    return failback_key(job)


@dataclass
class DatasetBack:
    backup: str  # here
    server: str  # on the file server
    base: str = ""  # the newest snapshot both hold
    kind: str = ""  # incremental, full (made on the backup), resumed, present (sent before), failed, refused
    bytes: int = 0
    diverged: int = 0  # bytes the file server wrote after the base (written@base)
    diverged_snaps: list[str] = field(default_factory=list)  # its snapshots after the base
    kept: str = ""  # where that is kept
    error: str = ""


@dataclass
class FailbackReport:
    job: str
    snapshot: str = ""
    done: bool = False  # the direction is returned
    datasets: list[DatasetBack] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[DatasetBack]:
        return [d for d in self.datasets if d.kind in (Outcome.FAILED, "refused")]


def common_base(backup: list[Snap], server: list[Snap], upto: str) -> Snap | None:
    """The newest of the backup's snapshots older than ``upto`` that the file server holds too (by
    guid: the same snapshot, whatever the names)."""
    have = {s.guid for s in server if not s.bookmark}
    mine = sorted((s for s in backup if not s.bookmark and s.name != upto), key=lambda s: s.txg)
    return next((s for s in reversed(mine) if s.guid in have), None)


def all_kept(after: list[Snap], kept: list[Snap]) -> bool:
    """Every snapshot the file server made after the base is in the kept clone (same guid): rolling
    back destroys no data that is not elsewhere."""
    there = {s.guid for s in kept if not s.bookmark}
    return bool(after) and all(s.guid in there for s in after)


class Failback:
    def __init__(self, job: Replicate, link: Wire, conn: sqlite3.Connection | None, *, discard_diverged: bool = False, dry_run: bool = False,
                 stop: threading.Event | None = None, progress: Callable[[int], None] | None = None,
                 now: float | None = None) -> None:
        self.job, self.link, self.conn = job, link, conn
        backup_here(job)  # (refuses a push job's config here)
        self.server, self.backup = job_hosts(job, link)
        self.discard, self.dry_run = discard_diverged, dry_run
        self.stop, self.progress = stop or threading.Event(), progress
        self.now = now or time.time()
        self.report = FailbackReport(job.name)
        self._transfer: Transfer | None = None
        self._done = 0

    def server_of(self, ds: str) -> str:
        return self.job.source + ds[len(self.job.target):]

    def run(self) -> FailbackReport:
        from .. import state

        j = self.job
        rec = (state.record(self.conn, record_key(j.name)) if self.conn is not None else None) or {}
        if rec.get("done"):  # an earlier failback's
            rec = {}
        if marked(self.backup, j.target) is None:
            raise FailoverRefused(f"{j.target} is not failed over (rebal failover {j.name}): there is nothing to fail "
                                  "back; the replication goes on as it is")
        stamp = rec.get("stamp") or datetime.fromtimestamp(self.now, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        snap = rec.get("snapshot") or snapshot_name(j.name, datetime.fromtimestamp(self.now, timezone.utc))
        self.stamp, self.snap = stamp, snap
        self.report.snapshot = snap
        if not self.dry_run and self.conn is not None and not rec:
            state.set_record(self.conn, record_key(j.name), {"stamp": stamp, "snapshot": snap, "done": False})
        # the file server first: while it cannot be reached the backup goes on serving, unfrozen
        server = self.server.tree(j.source, recursive=j.recursive, tokens=True) or Tree()
        self._freeze()
        backup = self.backup.tree(j.target, recursive=j.recursive) or Tree()
        for ds in sorted(backup.snaps, key=lambda d: (d.count("/"), d)):
            rep = DatasetBack(ds, self.server_of(ds))
            self.report.datasets.append(rep)
            if self.stop.is_set():
                rep.kind, rep.error = Outcome.FAILED, "stopped before it began; the same command again goes on"
                continue
            if any(rep.server.startswith(f.server + "/") for f in self.report.failed):
                rep.kind, rep.error = "refused", "its parent did not come back"
                continue
            try:
                self._one(rep, backup, server)
            except (HostError, TransportError) as e:
                rep.kind, rep.error = Outcome.FAILED, str(e)
        if not self.report.failed and not self.dry_run:
            self._return()
        return self.report

    def _freeze(self) -> None:
        """Nothing more is written on the backup; its snapshot is the failback's point."""
        j = self.job
        vals = self.backup.values(j.target, ["readonly", "type"], recursive=j.recursive)
        steps = [f"zfs set readonly=on {d}" for d in sorted(vals) if vals[d].get("type") == "filesystem"
                 and vals[d].get("readonly") != "on"]
        there = self.backup.exists(f"{j.target}@{self.snap}")
        if not there:
            steps.append(f"zfs snapshot {'-r ' if j.recursive else ''}{j.target}@{self.snap}")
        if self.dry_run:
            self.report.planned += steps
            return
        for d in sorted(vals):
            if vals[d].get("type") == "filesystem" and vals[d].get("readonly") != "on":
                self.backup.set(d, "readonly", "on")
        if not there:
            self.backup.snapshot([f"{j.target}@{self.snap}"], recursive=j.recursive)

    def _one(self, rep: DatasetBack, backup: Tree, server: Tree) -> None:
        ds, m = rep.backup, rep.server
        if self.dry_run and not backup.has(ds, self.snap):
            backup.snaps[ds].append(Snap(self.snap, -1, 1 << 62))  # (the snapshot step would make it)
        want = backup.guid(ds, self.snap)
        if server.guid(m, self.snap) == want:
            rep.kind = "present"
            return
        token = server.tokens.get(m)
        if token:
            rep.kind = "resumed"
            self._send(rep, self._t().send(f"{ds}@{self.snap}", token=token), m)
            return
        mine = server.snaps.get(m)
        if mine is None:  # made on the backup while it served
            if why := self._no_room(f"{ds}@{self.snap}", m.rsplit("/", 1)[0]):
                rep.kind, rep.error = "refused", why
                return
            rep.kind = "full"
            self._send(rep, self._t().send(f"{ds}@{self.snap}"), m)
            return
        base = common_base(backup.snaps[ds], mine, self.snap)
        if base is None:
            rep.kind, rep.error = "refused", self._no_base(ds, m, backup.snaps[ds], mine)
            return
        rep.base = base.name
        here = next(s for s in mine if s.guid == base.guid and not s.bookmark)  # the same snapshot there
        after = sorted((s for s in mine if not s.bookmark and s.txg > here.txg), key=lambda s: s.txg)
        rep.diverged_snaps = [s.name for s in after]
        written = self.server.written_since(m, False, [f"written@{here.name}"])
        if written is None and not self.discard:
            rep.kind, rep.error = "refused", (f"this zfs cannot say what was written to {m} after @{here.name} (no "
                                              "written@): give --discard-diverged once you know nothing there matters")
            return
        rep.diverged = (written or {}).get((m, f"written@{here.name}"), 0)
        between = any(s.txg > base.txg and s.name != self.snap for s in backup.snaps[ds] if not s.bookmark)
        if why := self._no_room(f"{ds}@{self.snap}", m, base=f"@{base.name}", between=between):
            rep.kind, rep.error = "refused", why  # (before anything is changed on the file server)
            return
        self._hold_still(m)
        if (after or rep.diverged) and not self.discard and not self._keep(rep, m, here, after):
            return
        self._roll_back(rep, m, here, after)  # (nothing after the base, or all of it kept: destroys nothing)
        rep.kind = "incremental"
        self._send(rep, self._t().send(f"{ds}@{self.snap}", base=f"@{base.name}", between=between), m)

    def _no_room(self, snapshot: str, into: str, *, base: str | None = None, between: bool = False) -> str:
        """Why the backup's stream of ``snapshot`` would not fit where it goes on the file server
        (empty: it fits, or neither zfs can say)."""
        need = self._t().size(snapshot, base=base, between=between)
        if need is None:
            return ""
        free = self.server.values(into, ["available"], recursive=False).get(into, {}).get("available", "")
        if not free.isdigit() or need <= int(free):
            return ""
        return (f"the backup's changes for {into} are {human(need)} and the file server has {human(int(free))} free "
                "there: make room (nothing was changed on it), then run again")

    def _no_base(self, ds: str, m: str, backup: list[Snap], mine: list[Snap]) -> str:
        guids = {s.guid for s in backup}
        mark = next((s for s in mine if s.bookmark and s.guid in guids), None)
        if mark is not None:
            return (f"{m} keeps only the bookmark #{mark.name} of the last replication, and a receive needs a "
                    f"snapshot: this dataset would come back whole. Restore it (rebal restore {self.job.name} --all "
                    "--to NEW) and swap the names; set keep_base = true in the job so the next failback is "
                    "incremental")
        return (f"{m} and {ds} have no snapshot in common: nothing was ever replicated between them, or the "
                f"file server's dataset is another one now. Rename it on the file server and run again (it is "
                "then sent whole)")

    def _keep(self, rep: DatasetBack, m: str, base: Snap, after: list[Snap]) -> bool:
        """What the file server wrote after the base, as a read-only clone of the base elsewhere in
        its pool, checked by guid before anything is rolled back. False: refused (said in ``rep``).
        A receive makes a clone of a single incremental only (`-o origin=` with `-I` is refused as
        "destination does not exist"): the base to the first snapshot after it, then the rest."""
        pool, _, rest = m.partition("/")
        holder = f"{pool}/{DIVERGED}-{self.stamp}"
        parts = rest.split("/") if rest else [pool]
        keep = "/".join([holder, *parts])
        parents = [holder] + ["/".join([holder, *parts[:i]]) for i in range(1, len(parts))]
        rep.kept = keep
        mark = f"{DIVERGED}-{self.stamp}"
        if not self.server.abilities().receive_o:
            rep.kind, rep.error = "refused", (f"this zfs cannot receive a clone (zfs receive -o origin=): what {m} "
                                              "holds after the base cannot be kept; give --discard-diverged to roll "
                                              "it back without keeping it")
            return False
        plan = [f"zfs snapshot {m}@{mark}"] if not any(s.name == mark for s in after) else []
        if plan and not self.dry_run:
            self.server.snapshot([f"{m}@{mark}"])
            after = self._after(m, base)
        chain = [s.name for s in after] + ([mark] if self.dry_run and plan else [])
        kept = (self.server.tree(keep, recursive=False) or Tree()).snaps.get(keep)
        t = Transfer(self.server, self.server, self.job, self.link, stop=self.stop, notes=self.report.notes)
        streams: list[tuple[list[str], list[str]]] = []
        if kept is None:
            plan += [f"zfs create -o canmount=off {p}" for p in parents]
            streams.append((t.send(f"{m}@{chain[0]}", base=f"@{base.name}"),
                            self.server.receive(keep, props={"origin": f"{m}@{base.name}", "readonly": "on"},
                                                resumable=False)))
            start = chain[0]
        else:
            have = [s.name for s in after if s.guid in {k.guid for k in kept}]
            newest = max(kept, key=lambda k: k.txg, default=None)
            if not have or newest is None or newest.name != have[-1]:
                rep.kind, rep.error = "refused", (f"{keep} exists and is not what a failback keeps of {m}: look at "
                                                  "it, rename it, and run again")
                return False
            start = have[-1]
        if start != chain[-1]:
            streams.append((t.send(f"{m}@{chain[-1]}", base=f"@{start}", between=chain.index(start) < len(chain) - 2),
                            self.server.receive(keep, resumable=False)))
        if self.dry_run:
            self.report.planned += plan + [t.line(send, recv) for send, recv in streams]
            return True
        for p in parents if kept is None else []:
            self.server.create_holder(p)
        try:
            for send, recv in streams:
                t.run(send, recv, what=f"keeping what {m} holds after @{base.name}")
        except StreamFailed as e:
            rep.kind, rep.error = Outcome.FAILED, str(e)
            return False
        kept = (self.server.tree(keep, recursive=False) or Tree()).snaps.get(keep, [])
        if not all_kept(self._after(m, base), kept):
            rep.kind, rep.error = Outcome.FAILED, f"{keep} does not hold every snapshot {m} made after @{base.name}: nothing rolled back"
            return False
        return True

    def _after(self, m: str, base: Snap) -> list[Snap]:
        """The file server's snapshots of ``m`` after the base, oldest first, as they are now."""
        now = (self.server.tree(m, recursive=False) or Tree()).snaps.get(m, [])
        return sorted((s for s in now if not s.bookmark and s.txg > base.txg), key=lambda s: s.txg)

    def _hold_still(self, m: str) -> None:
        """Nothing is written to the file server's dataset while it comes back (readonly=on; put back
        as it was once the failback is done: the record keeps what it was)."""
        from .. import state

        if self.dry_run:
            self.report.planned.append(f"zfs set readonly=on {m} (on the file server, until the failback is done)")
            return
        rec = (state.record(self.conn, record_key(self.job.name)) if self.conn is not None else None) or {}
        was = rec.setdefault("server_readonly", {})
        if m not in was:
            local = self.server.local_props(m, recursive=False).get(m, {})
            was[m] = local.get("readonly")
            if self.conn is not None:
                state.set_record(self.conn, record_key(self.job.name), rec)
        self.server.set(m, "readonly", "on")

    def _roll_back(self, rep: DatasetBack, m: str, base: Snap, after: list[Snap]) -> None:
        if self.dry_run:
            self.report.planned.append(f"zfs rollback -r {m}@{base.name}")
            return
        if after:  # this job's holds on them (a replication's base); another's hold stops the rollback
            self.server.release(f"rebal-{self.job.name}", [f"{m}@{s.name}" for s in after])
        self.server.rollback(f"{m}@{base.name}")

    def _t(self) -> Transfer:
        if self._transfer is None:  # the replication's stream, the hosts swapped
            self._transfer = Transfer(self.backup, self.server, self.job, self.link, bwlimit=self.job.bwlimit,
                                      stop=self.stop, notes=self.report.notes)
        return self._transfer

    def _send(self, rep: DatasetBack, send: list[str], m: str) -> None:
        t = self._t()
        recv = self.server.receive(m, resumable=True)
        if self.dry_run:
            self.report.planned.append(t.line(send, recv))
            return
        try:
            res = t.run(send, recv, progress=counted(partial(setattr, rep, "bytes"), self._done, self.progress),
                        what=f"{rep.backup} to {m}")
            rep.bytes = res.bytes
        except StreamFailed as e:
            rep.kind = Outcome.FAILED
            rep.error = "stopped; the same command again resumes it" if e.result.stopped else str(e)
            rep.bytes = e.result.bytes
        self._done += rep.bytes

    def _return(self) -> None:
        """The original direction: the backup read-only and unmounted, as before the failover."""
        from .. import state

        j = self.job
        over = (state.record(self.conn, over_key(j.name)) if self.conn is not None else None) or {}
        was: dict[str, dict[str, str | None]] = over.get("was") or {}
        vals = self.backup.values(j.target, ["type"], recursive=j.recursive)
        tree = sorted((d for d in vals if vals[d].get("type") == "filesystem"), key=lambda d: (-d.count("/"), d))
        for d in reversed(tree):  # a backup is read-only whatever it was (a write there stops the next incremental)
            value = was.get(d, {}).get("mountpoint")
            if d in was and value is None:
                self.backup.inherit(d, "mountpoint")
            elif value is not None:
                self.backup.set(d, "mountpoint", value)
            self.backup.set(d, "readonly", "on")
        for d in tree:  # last: a new mount point mounts it again
            self.backup.unmount(d)
        self.backup.inherit(j.target, MARK)
        back = (state.record(self.conn, record_key(j.name)) if self.conn is not None else None) or {}
        for m, value in (back.get("server_readonly") or {}).items():
            if value is None:
                self.server.inherit(m, "readonly")
            else:
                self.server.set(m, "readonly", value)
        if self.conn is not None:
            state.set_record(self.conn, over_key(j.name), None)
            state.set_record(self.conn, record_key(j.name), {"stamp": self.stamp, "snapshot": self.snap, "done": True,
                                                             "at": time.time()})
        self.report.done = True


def failback(job: Replicate, link: Wire, conn: sqlite3.Connection | None, **kw: Any) -> FailbackReport:
    rep = Failback(job, link, conn, **kw).run()
    if rep.failed:
        raise FailbackFailed(rep)
    return rep


def run_failback(cfg: Config, job: Replicate, *, dry_run: bool = False, progress: Callable[[int], None] | None = None,
                 **kw: Any) -> FailbackReport:
    """A failback over the job's ssh, recorded as a run (its bytes as it goes, as a restore's)."""
    from .. import state
    from ..recorded import recorded
    from ..replicate.job import connect

    conn = state.connect(cfg.state_db)
    last = [0.0]
    with recorded(conn, "failback", job=job.name, dry_run=dry_run) as run:
        def on_bytes(n: int) -> None:
            if progress:
                progress(n)
            if run.id is not None and time.monotonic() - last[0] >= 0.5:
                last[0] = time.monotonic()
                state.set_progress(cfg.state_db, run.id, n)

        with connect(job) as link:
            rep = failback(job, link, None if dry_run else conn, dry_run=dry_run, progress=on_bytes, **kw)
        run.details = {"bytes": sum(d.bytes for d in rep.datasets), "snapshot": rep.snapshot, "done": rep.done}
        run.outcome = Outcome.OK
    return rep


class FailbackFailed(RebalError):
    def __init__(self, rep: FailbackReport) -> None:
        self.report = rep
        first = rep.failed[0]
        super().__init__(f"{len(rep.failed)} of {len(rep.datasets)} dataset(s) not back on the file server; "
                         f"{first.server}: {first.error}. The backup stays failed over; run the same command again "
                         "once that is mended: what came back stays, a cut send resumes")
