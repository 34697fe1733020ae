"""Replication by `zfs send | ssh backup zfs receive`: snapshots, incrementals, resume tokens,
the cursor that keeps the next base, retention.

Order of a run: (1) a receive cut in a previous run is resumed first where the ZFS on both ends can
(`receive -s` left a `receive_resume_token`), or aborted when its snapshot is gone on the source;
(2) one atomic (recursive) snapshot `rebal-<job>-<UTC>`; (3) per dataset, parents before children,
siblings in parallel: the newest snapshot or bookmark common to both sides (by guid) is the base of an
incremental (`-I @snap`, or `-i #bookmark`; a full send when the target does not exist); (4) the
cursor: where the source has bookmarks, a bookmark of the new snapshot, so no snapshot need stay on
the source; else the new snapshot is held (retention.py); (5) rebal's own snapshots of this job are
pruned on both sides by the retention policy, never a base, and older cursor bookmarks destroyed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from .. import names
from ..errors import RebalError
from ..outcome import Outcome
from ..process.command import Counted, run
from ..throttle import Throttle
from ..process.command import Runner
from ..zfs.host import ZfsHost, here_host
from . import backup_record as R
from . import source_snaps as S
from . import targets as T
from .capabilities import Capabilities
from .guard import rollback_allowed
from .policy import (
    SendPlan,
    Snap,
    base_args,
    explain_receive_error,
    newest_common,
    plan_send,
    snapshot_name,
)
from .remote import ReplicationError
from .retention import keep_cursor
from .select import BAD_NAME, select
from ..transport import Here, Wire
from .zfs_run import DatasetReport, Job, ZfsReport  # noqa: F401  (imported from here too)

if TYPE_CHECKING:
    from ..state import Cache
    from .unchanged import ByRecord



class ZfsReplicator(Capabilities):
    def __init__(self, job: Job, ssh: Wire, *, source: ZfsHost | None = None, runner: Runner = run,
                 force_rollback: tuple[str, ...] = (), dry_run: bool = False, stop: threading.Event | None = None,
                 progress: Callable[[int, int | None], None] | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc), cache: Cache | None = None,
                 estimates: bool = True, landed: dict[str, str] | None = None,
                 on_dataset: Callable[[DatasetReport], None] | None = None) -> None:
        names.dataset(job.source)
        names.dataset(job.target)
        self.job, self.ssh = job, ssh
        self.counted = Counted(runner)  # this run's commands here (two runs at once count their own)
        here = Here(self.counted)
        # the two hosts, whichever end rebal runs on: a pull job runs on the backup host, so there
        # the source is the other end; a job with a local target has both here
        self.source: ZfsHost
        self.target: ZfsHost
        if job.pull:
            self.source, self.target = source or ZfsHost(ssh), ZfsHost(here)
        else:
            self.source = source or here_host(here)
            self.target = ZfsHost(here) if ssh.local else ZfsHost(ssh)
        self.gate: dict | None = None  # what a gate on the other end allows (None: no gate)
        self.cache = cache  # state.Cache: the other end's usage text, kept a day (one round trip less)
        self.resumable = False  # both ends resume a cut stream (detect)
        self.landed = landed or {}  # dataset -> the snapshot that landed on the backup, as recorded
        self.plan: ByRecord | None = None  # what the record and the backup's bases said (unchanged.py)
        self.recorded: dict[str, float] = {}  # backup datasets a record stood for (backup_record.py)
        self.force_rollback, self.dry_run = force_rollback, dry_run
        self.stop = stop or threading.Event()
        self.progress = progress
        self.on_dataset = on_dataset  # told each dataset's report as it is done (a log's line per dataset)
        self.estimates = estimates  # zfs send -nP per stream, for a bar's total (one local command each)
        self.clock = clock
        self.throttle = Throttle(job.bwlimit)
        self.report = ZfsReport()
        self.bookmarks = True  # until this ZFS says it has none (zfs-fuse)
        self.procs: list = []
        self._lock = threading.Lock()
        self._flight: dict[int, DatasetReport] = {}  # streams under way, for the progress sum

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> ZfsReport:
        remote0 = self.ssh.commands
        t0 = time.monotonic()
        try:
            return self._run_all()
        finally:
            self.report.local_commands = self.counted.n
            self.report.remote_commands = self.ssh.commands - remote0
            # what no phase holds (detecting the hosts' abilities, choosing the datasets, the orphans),
            # as a phase of its own: every second of the run is in one
            whole = time.monotonic() - t0
            self.report.phases["other"] = round(max(0.0, whole - sum(self.report.phases.values())), 3)

    def _run_all(self) -> ZfsReport:
        t0 = time.monotonic()
        self.detect()
        here = None
        self.plan = None
        if self.landed and self.may_skip():
            here = self._by_record(t0)
            if self.plan is not None and len(self.plan.same) == len(self.selection.included):
                return self.report
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-list") as ex:
            # the backup's datasets, snapshots and resume tokens, while this side lists its own: the
            # two do not wait on each other
            there = ex.submit(self._list_target, self.resumable)
            if here is None:
                self.selection = select(self.job, self.source)
                if self.may_skip() and self.selection.included:
                    here = self.source.listing(self.job.source, self.job.recursive)
            datasets = chosen = self.selection.included
            self.target_tree, tokens = there.result()
        self.report.excluded = [f"{c.dataset} ({c.why})" for c in self.selection.excluded]
        self.report.warnings += [f"{c.dataset} is not backed up: {c.why}" for c in self.selection.excluded
                                 if c.why.startswith(BAD_NAME)]
        if not datasets:
            raise ReplicationError(f"no dataset under {self.job.source} is chosen by this job's rules: "
                                   + "; ".join(self.report.excluded[:5]))
        if tokens:
            for ds in datasets:
                if self.target_of(ds) in tokens:
                    self.resume(ds, tokens[self.target_of(ds)])
            self.target_tree, _ = self._list_target(False)  # what the resumes added
        self.report.phases["listing"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        datasets = self.skip_unchanged(datasets, here or None)
        self.report.phases["unchanged"] = round(time.monotonic() - t0, 3)
        if not datasets:
            self.report.notes.append("nothing was written since the last run: no snapshot taken, nothing sent")
            return self.report
        whole = self.selection.whole and not any(d.kind == "unchanged" for d in self.report.datasets)
        left_out = [c.dataset for c in self.selection.excluded] + [d.source for d in self.report.datasets
                                                                   if d.kind == "unchanged"]
        t0 = time.monotonic()
        snap = self.report.snapshot = self._snapshot(datasets, whole, left_out)
        self.report.phases["snapshot"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        self.source_tree = self._with_new_snapshot(here, datasets, snap)
        self.report.phases["listing the source again"] = round(time.monotonic() - t0, 3)
        self.orphans = T.find_orphans(self, chosen)
        t0 = time.monotonic()
        if not self.dry_run:
            R.forget(self, [self.target_of(d) for d in datasets])
        self._send_by_level(datasets, snap)
        self.report.phases["sends"] = round(time.monotonic() - t0, 3)
        t0 = time.monotonic()
        if not self.dry_run and not self.stop.is_set():
            self.prune(chosen)
            R.keep(self)
        self.report.phases["prune"] = round(time.monotonic() - t0, 3)
        return self.report

    def _with_new_snapshot(self, here: dict[str, list[Snap]] | None, datasets: list[str],
                           snap: str) -> dict[str, list[Snap]]:
        """The source's snapshots and bookmarks, the run's new snapshot included. Where the run listed
        the source before its snapshot (``here``), only the new snapshot is asked for (its guid and
        txg, one command for the datasets): a dataset of 10,000 snapshots is not listed twice. Else,
        or where one of them is not found, the whole tree is listed again, in one command."""
        if here is not None and self.dry_run:
            return here
        if here is not None:
            got = self.source.snapshots_named([f"{ds}@{snap}" for ds in datasets])
            if all(f"{ds}@{snap}" in got for ds in datasets):
                tree = {ds: list(snaps) for ds, snaps in here.items()}
                for ds in datasets:
                    tree[ds] = sorted(tree.get(ds, []) + [got[f"{ds}@{snap}"]], key=lambda s: s.txg)
                return tree
        return self.source.listing(self.job.source, self.job.recursive)

    def _by_record(self, t0: float) -> dict[str, list[Snap]]:
        """Ask rebal's record, with the backup's answer that it still holds every base, whether
        nothing was written since (unchanged.first_questions: every question at once). Where so, the
        run is reported so; else the plan it leaves says which datasets sit out and what part of the
        backup to list. The source's listing."""
        from .unchanged import first_questions

        self.selection, here, self.plan = first_questions(self)
        if self.plan is None or len(self.plan.same) < len(self.selection.included):
            return here
        self.report.phases["listing"] = round(time.monotonic() - t0, 3)
        self._unchanged(self.selection.included, self.plan.same)
        self.report.backup_asked = "bases"
        self.report.notes.append("nothing was written since the last run: no snapshot taken, nothing sent; "
                                 "the backup still holds every base (rebal's record of what landed, its "
                                 "bases asked of the backup host in one command)")
        return here

    def _list_target(self, tokens: bool) -> tuple[dict[str, list[Snap]], dict[str, str]]:
        """The backup's datasets with their snapshots (and resume tokens where asked): the whole tree,
        or where rebal's record said which datasets sit out, only the part the others need."""
        if self.plan is not None:
            known = R.from_record(self, self.plan.listed)  # what a record of rebal's stands for
            rest = [t for t in self.plan.listed if t not in known]
            self.report.backup_asked, self.report.backup_recorded = "part", len(known)
            self.report.backup_listed = len(rest) + len(self.plan.parents)
            tree, found = self.target.part(rest, tokens, self.plan.parents)
            return tree | known, found
        tree, found = self.target.tree_tokens(self.job.target, tokens)
        self.report.backup_asked, self.report.backup_listed = "whole", len(tree)
        return tree, found

    def _snapshot(self, datasets: list[str], whole: bool, left_out: list[str]) -> str:
        """The run's snapshot of ``datasets`` (of the whole tree at once where ``whole``), named so it
        clashes with nothing on the backup; a dry run only says it."""
        if self.dry_run:
            snap = snapshot_name(self.job.name, self.clock())
            self.report.planned.append(S.planned_snapshot(self.job.source, snap, self.job.recursive,
                                                          None if whole else datasets))
            return snap
        used = {s.name for snaps in self.target_tree.values() for s in snaps}
        return S.take_snapshot(self.source, self.job.source, self.job.name, self.job.recursive, self.clock,
                               avoid=used, datasets=None if whole else datasets, left_out=left_out)

    def _send_by_level(self, datasets: list[str], snap: str) -> None:
        """Send ``datasets`` a level of the tree at a time (a child after its parent is on the target),
        ``parallel`` at once within a level; a child of one that failed waits for the next run."""
        levels: dict[int, list[str]] = {}
        for ds in datasets:
            levels.setdefault(ds.count("/"), []).append(ds)
        for depth in sorted(levels):
            if self.stop.is_set():
                break
            try:
                T.make_parents(self, levels[depth], set(datasets))  # after their parents' level: on top of what was received
            except RebalError as e:
                self.report.datasets.extend(DatasetReport(d, self.target_of(d), Outcome.FAILED, error=str(e)) for d in levels[depth])
                levels[depth] = []
            with ThreadPoolExecutor(max_workers=max(1, self.job.parallel)) as pool:
                reports = list(pool.map(lambda d: self._told(self.replicate_dataset(d, snap)), levels[depth]))
            self.report.datasets.extend(reports)
            failed = {r.source for r in reports if r.kind in (Outcome.FAILED, "renamed")}
            # a child of a dataset that failed has no parent on the target: leave it for next time
            for deeper in [k for k in levels if k > depth]:
                levels[deeper] = [d for d in levels[deeper] if not any(d.startswith(f + "/") for f in failed)]

    def _told(self, rep: DatasetReport) -> DatasetReport:
        if self.on_dataset is not None and rep.kind not in ("unchanged", "nothing"):
            self.on_dataset(rep)
        return rep

    def source_of(self, target: str) -> str:
        return self.job.source + target[len(self.job.target):]

    def may_skip(self) -> bool:
        """Whether datasets with nothing new may sit the run out (old ZFS: no written@ either)."""
        return self.job.skip_unchanged and self.source.abilities().send_size

    def skip_unchanged(self, datasets: list[str], tree: dict | None = None) -> list[str]:
        """The datasets to snapshot and send this run: those with nothing written since their base
        sit it out (unchanged.py), reported as such. Only where the ZFS can say (OpenZFS).
        ``tree``: the source's snapshots and bookmarks, where already listed."""
        if not self.may_skip():
            return datasets
        from .unchanged import find_unchanged

        # where the record settled a dataset (its base on the backup, something written since, no
        # receive resumed), it is sent; the others are asked on the part of the backup listed for
        # them: a resumed receive, or a run killed after its receive, may have brought one up to date
        known = self.plan.same if self.plan is not None else {}
        others = [d for d in datasets if d not in known]
        if self.plan is not None and not self.report.tokens:
            others = [d for d in others if d not in self.plan.bases]
            if not others:
                return self._unchanged(datasets, known)
        if tree is None:
            tree = self.source.listing(self.job.source, self.job.recursive)
        same, note = find_unchanged(self.job.source, self.job.recursive, others, tree, self.target_tree,
                                    self.target_of, self.source)
        if note:
            self.report.notes.append(note)
        return self._unchanged(datasets, {**known, **same})

    def _unchanged(self, datasets: list[str], same: dict[str, Snap]) -> list[str]:
        """Report the datasets in ``same`` (-> their base) as sitting the run out; the others remain."""
        for ds in datasets:
            if ds in same:
                b = same[ds]
                self.report.datasets.append(DatasetReport(ds, self.target_of(ds), "unchanged", base=b.name,
                                                          base_bookmark=b.bookmark, cursor="bookmark" if b.bookmark else "snapshot"))
        return [d for d in datasets if d not in same]

    def resume(self, ds: str, token: str) -> None:
        target = self.target_of(ds)
        self.report.tokens[target] = token
        info = self.source.token_sends(token)
        if info is None:
            # its snapshot is gone on the source: abort the partial receive, start from the base
            self.report.aborted_tokens.append(target)
            if not self.dry_run:
                self.target.abort(target)
            self.report.notes.append(f"{target}: the interrupted receive could not be resumed (its snapshot is "
                                     "gone on the source); it was aborted and the send starts from the common base")
            return
        if self.dry_run:
            self.report.planned.append(f"zfs send -t <token> | zfs receive -s {target}  ({info.toname})")
            return
        rep = DatasetReport(ds, target, "resumed", base=info.toname, expected=info.size)
        self.report.datasets.append(rep)  # its bytes count in the run, the record and the metrics
        res = self._stream([self.source.resume_send(token)], self.receive_argv(target), rep)
        if res.ok:
            self.report.resumed.append(info.toname)
            if info.kind == "full":  # a new replica, as after a full send: read-only (see replicate_dataset)
                self.target.set(target, "readonly", "on")
        else:
            raise ReplicationError(f"resuming the receive of {info.toname} into {target} failed: "
                                   f"{res.said}")

    def _source_side(self, ds: str, snap: str) -> tuple[list[Snap], Snap]:
        """The dataset's snapshots and bookmarks here, and the one to send (made up in a dry run)."""
        src = self.source_tree.get(ds)
        if src is None:
            src = self.source.snapshots(ds, bookmarks=True) or []
        to = next((s for s in src if s.name == snap and not s.bookmark), None)
        if to is None:
            if not self.dry_run:
                raise ReplicationError(f"{ds}@{snap} is missing right after it was taken")
            to = Snap(snap, 0, 1 << 62)
            src = src + [to]
        return src, to

    def replicate_dataset(self, ds: str, snap: str) -> DatasetReport:
        target = self.target_of(ds)
        rep = DatasetReport(ds, target)
        try:
            src, to = self._source_side(ds, snap)
            tgt = self.target_tree.get(target)  # None: no such dataset on the backup host
            if tgt is None and self.target_tree:
                was = T.renamed_from(self, ds, src, snap)
                if was is not None:
                    rep.kind = "renamed"
                    common = newest_common(src, self.orphans[was])
                    rep.base = common.name if common else None  # kept: the next incremental starts there
                    self.report.warnings.append(
                        f"{ds} was renamed from {self.source_of(was)}: its backup is {was} on the backup host. "
                        f"Not sent twice: run 'zfs rename {was} {target}' there, and the next run continues "
                        "incrementally")
                    return rep
                self.report.notes.append(f"{ds} is new: sent in full")
            rollback = rollback_allowed(ds, target, self.force_rollback)
            plan = plan_send(ds, src, tgt, to, rollback, target)
            rep.base = plan.base.name if plan.base else None
            rep.base_bookmark = bool(plan.base and plan.base.bookmark)
            if plan.kind in ("diverged", "unrelated"):
                rep.kind, rep.error = Outcome.FAILED, plan.message
                return rep
            if plan.kind == "nothing":
                rep.kind = "nothing"
                return rep
            flags = self.send_flags()
            if plan.kind != "full":
                assert plan.base is not None  # an incremental plan always has its base
                between = any(not s.bookmark and plan.base.txg < s.txg < to.txg for s in src)
                flags += base_args(ds, plan.base, between)
            send = self.source.send(f"{ds}@{snap}", flags)
            rep.kind = plan.kind
            rep.expected = self.estimate(flags, ds, snap, plan.kind) if self.estimates or self.dry_run else None
            force = plan.kind == "incremental" and rollback
            if force and (why := self._failed_over(target)):
                rep.kind, rep.error = Outcome.FAILED, why
                return rep
            if force:
                self._say_rollback(target, plan)
            recv = self.receive_argv(target, force=force, full=plan.kind == "full")
            if self.dry_run:
                self.report.planned.append(" ".join(send) + (" | " if self.ssh.local else " | ssh ... ") + " ".join(recv))
                return rep
            res = self._stream([send], recv, rep)
            if not res.ok:
                rep.kind = Outcome.FAILED
                if res.stopped:
                    rep.error = "stopped before the transfer ended"
                elif not self.ssh.local and (res.receiver_rc if self.source.local else res.sender_rc) == 255:
                    from ..transport import classify_ssh  # (the far end's ssh: the sender's in a pull job)

                    rep.error = str(classify_ssh(self.ssh.ep, res.receiver_err if self.source.local else res.sender_err))
                elif res.receiver_rc != 0:
                    rep.error = explain_receive_error(res.receiver_err, target, rep.base, forced=force)
                    self.usage_stale(res.receiver_err)
                else:
                    rep.error = f"zfs send of {ds}@{snap} failed: {res.sender_err or res.sender_rc}"
                return rep
            if plan.kind == "full":
                # a mounted, writable replica is "modified" by atime alone, which makes the next
                # incremental fail: without -u it is mounted at once, and with -u an admin who mounts
                # it to look inside breaks it the same way (seen on OpenZFS 2.4.4). Read-only it is:
                # received so (-o readonly=on: no round trip of its own), or set right after.
                if not self.target.abilities().receive_o:
                    self.target.set(target, "readonly", "on")
                if not self.target.abilities().receive_u:
                    self.report.notes.append(f"{target} set readonly=on (the backup host's zfs has no receive -u)")
            rep.cursor = keep_cursor(self, ds, snap, plan.base if plan.kind == "incremental" else None)
            self._trees_after(ds, target, src, tgt, plan, to, rep.cursor)
            return rep
        except RebalError as e:
            rep.kind, rep.error = Outcome.FAILED, str(e)
            return rep

    def _failed_over(self, target: str) -> str:
        """Why a --force-rollback of ``target`` is refused: a failed-over backup is written on."""
        since = self.target.values(target, [names.FAILOVER_PROPERTY], recursive=False).get(target, {}).get(
            names.FAILOVER_PROPERTY, "-")
        return "" if since in ("-", "") else (f"{target} is failed over since {since} on the backup host: "
                                              "--force-rollback would destroy what was written there. "
                                              "rebal failback there brings it here first")

    def _say_rollback(self, target: str, plan: SendPlan) -> None:
        """What a named --force-rollback destroys, said as a warning of the run (and of its dry run)."""
        newer = plan.newer_on_target
        self.report.warnings.append(
            f"--force-rollback {target}: rolled back to @{plan.base.name if plan.base else '?'}"
            + (f", destroying its newer snapshots {', '.join('@' + n for n in newer)}" if newer else "")
            + " and whatever was written there after it" + (" (dry run: nothing done)" if self.dry_run else ""))

    def _trees_after(self, ds: str, target: str, src: list[Snap], tgt: list[Snap] | None, plan: SendPlan, to: Snap,
                    cursor: str) -> None:
        """Keep both trees as they are now, instead of asking again for the pruning: the target got
        the new snapshot (and, from a snapshot base, those in between: -I); the source a bookmark."""
        have = {s.guid for s in tgt or []}
        lo = plan.base.txg if plan.kind == "incremental" and plan.base and not plan.base.bookmark else to.txg
        got = [s for s in src if not s.bookmark and lo < s.txg <= to.txg and s.guid not in have]
        if to.guid not in have and to not in got:
            got.append(to)
        # on the backup they are newer than all it had, in the source's order: txgs above its newest
        top = max((s.txg for s in tgt or []), default=0)
        got = [Snap(s.name, s.guid, top + i) for i, s in enumerate(sorted(got, key=lambda s: s.txg), 1)]
        with self._lock:
            self.target_tree[target] = sorted((tgt or []) + got, key=lambda s: s.txg)
            if cursor == "bookmark":
                self.source_tree.setdefault(ds, []).append(Snap(to.name, to.guid, to.txg, bookmark=True))

    def estimate(self, flags: list[str], ds: str, snap: str, kind: str) -> int | None:
        if self.source.abilities().send_size and (size := self.source.send_size(f"{ds}@{snap}", flags)) is not None:
            return size
        if kind == "full":  # old ZFS: the snapshot's referenced size is close to the stream size
            referenced = self.source.properties(f"{ds}@{snap}", ["referenced"], check=False).get("referenced", "")
            if referenced.isdigit():
                return int(referenced)
        return None

    def _stream(self, senders: list[list[str]], recv: list[str], rep: DatasetReport):
        def progress(n: int, rep: DatasetReport = rep) -> None:
            rep.bytes = n
            if self.progress:
                with self._lock:  # the streams done and those under way (sent in parallel), summed
                    self._flight[id(rep)] = rep
                    live = [d for d in self.report.datasets if d.kind not in ("unchanged", "nothing")]
                    live += [d for d in self._flight.values() if all(d is not x for x in live)]
                    done = sum(d.bytes for d in live)
                    # the total: zfs send -nP's estimate of each stream begun so far, where each has one
                    known = all(d.expected for d in live)
                    total = sum(max(d.expected or 0, d.bytes) for d in live) if known else None
                    self.progress(done, total)

        # the one way rebal moves a stream (stream.Transfer), with this run's filters and shared rate
        from .stream import Transfer

        t = Transfer(self.source, self.target, self.job, self.ssh, stop=self.stop,
                     filters=(self.filters_send, self.filters_recv), throttle=self.throttle)
        t0 = time.monotonic()
        rep.started = round(time.time(), 3)
        res = t.pump(senders, recv, progress=progress, procs=self.procs)
        rep.seconds = round(time.monotonic() - t0, 3)
        rep.bytes = res.bytes
        return res

    def prune(self, datasets: list[str]) -> None:
        from .retention import prune

        prune(self, datasets)


def kill_all(procs: list) -> None:
    from ..process.pipeline import kill

    for p in procs:
        kill(p)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:
            pass
