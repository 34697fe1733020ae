"""Replication by rsync over ssh, from a snapshot so the copy is consistent.

The source is read from `<mountpoint>/.zfs/snapshot/<snap>/`; where a ZFS has no `.zfs` directory
(zfs-fuse) the snapshot is cloned read-only to a private mountpoint for the run instead. rsync runs
with `-aHAX --numeric-ids --delete-delay --partial-dir`, so a run cut halfway keeps what it moved
and the next one sends only what is missing (and continues a partial file). Exit 23/24 (partial
transfer, vanished files) is a warning naming the files; any other code fails the run.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .. import names
from ..errors import RebalError
from ..process.command import run
from ..process.command import Runner
from ..zfs.host import HostError, ZfsHost, here_host
from . import guard
from . import source_snaps as S
from .remote import gate_info
from .policy import Buckets, is_ours, retain, snapshot_name, snapshot_time
from .select import BAD_NAME, select
from ..zfs.snapview import SnapView, cleanup_views
from ..transport import Here, Wire, classify_ssh

PARTIAL_DIR = ".rebal-partial"


class RsyncError(RebalError):
    pass


@dataclass
class RsyncReport:
    snapshot: str = ""
    bytes_sent: int = 0  # what went over the wire
    bytes_expected: int = 0  # total size of the files rsync had to transfer
    files_transferred: int = 0
    rsync_seconds: float = 0.0  # time rsync itself ran
    warnings: list[str] = field(default_factory=list)
    target_snapshot: str | None = None
    pruned_source: list[str] = field(default_factory=list)
    pruned_target: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # datasets of the source left out, and why

    @property
    def bytes(self) -> int:
        return self.bytes_sent


_STAT = {
    "bytes_sent": re.compile(r"^Total bytes sent:\s+([\d,]+)", re.M),
    "bytes_expected": re.compile(r"^Total transferred file size:\s+([\d,]+)", re.M),
    "files_transferred": re.compile(r"^Number of regular files transferred:\s+([\d,]+)", re.M),
}


def parse_stats(text: str) -> dict[str, int]:
    out = {}
    for k, rx in _STAT.items():
        m = rx.search(text)
        if m:
            out[k] = int(m.group(1).replace(",", ""))
    return out


def warning_files(stderr: str) -> list[str]:
    """The files rsync names in its warnings (vanished files, partial transfers)."""
    out = []
    for line in stderr.splitlines():
        m = re.search(r'file has vanished: "(.*)"', line)
        if m:
            out.append(f"vanished: {m.group(1)}")
        elif line.startswith("rsync:") and re.search(r"failed|(?i:error)", line):
            out.append(line.strip())
    return out


@dataclass
class RsyncJob:
    name: str
    source: str  # dataset
    target: str  # absolute directory on the backup host
    recursive: bool = False
    bwlimit: str | None = None  # rsync --bwlimit value (KiB/s unless suffixed)
    snapshot_target: bool = False
    retention_source: Buckets = field(default_factory=Buckets)
    retention_target: Buckets = field(default_factory=Buckets)
    exclude: tuple[str, ...] = ()  # which datasets (select.py)
    include: tuple[str, ...] = ()
    by_property: bool = False


def pattern_literal(path: str) -> str:
    """``path`` as an rsync pattern that matches itself only: rsync reads a backslash as an escape
    only in a pattern that holds a wildcard, so where one of ``*?[`` appears each is escaped (and
    backslashes with them); a name like ``proj[1]`` would otherwise match ``proj1``, not itself."""
    if not any(c in path for c in "*?["):
        return path
    return "".join("\\" + c if c in "*?[\\" else c for c in path)


class RsyncReplicator:
    def __init__(self, job: RsyncJob, ssh: Wire, *, source: ZfsHost | None = None, runner: Runner = run,
                 dry_run: bool = False, stop: threading.Event | None = None,
                 progress: Callable[[int], None] | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        names.dataset(job.source)
        if not job.target.startswith("/"):
            raise RsyncError(f"rsync target {job.target!r} is not an absolute directory")
        self.job, self.ssh = job, ssh
        self._run = runner
        self.here = source or here_host(Here(runner))  # the source's host: rsync jobs push
        self.there = ZfsHost(ssh)  # the backup's host (this one for a local target)
        self.target_dataset: str | None = None  # the dataset the target directory is on, once snapshotted
        self.dry_run = dry_run
        self.stop = stop or threading.Event()
        self.progress = progress
        self.clock = clock
        self.report = RsyncReport()
        self.datasets: list[str] = []  # the run's datasets, once chosen (what landed, for health)
        self.gate: dict | None = None  # what a gate on the backup host allows (None: no gate)
        self.procs: list = []

    def run(self) -> RsyncReport:
        job = self.job
        sel = select(job, self.here)
        datasets = sel.included
        self.report.excluded = [f"{c.dataset} ({c.why})" for c in sel.excluded]
        self.report.warnings += [f"{c.dataset} is not backed up: {c.why}" for c in sel.excluded
                                 if c.why.startswith(BAD_NAME)]
        if not datasets:
            raise RsyncError(f"no dataset under {job.source} is chosen by this job's rules")
        # every dataset's mount point, those left out too: a parent's copy must not delete their files
        mounts = {c.dataset: self._mountpoint(c.dataset) for c in sel.choices}
        if self.dry_run:
            snap = self.report.snapshot = snapshot_name(job.name, self.clock())
            self.report.planned.append(S.planned_snapshot(job.source, snap, job.recursive, None if sel.whole else datasets))
            self.report.planned.append(f"rsync {' '.join(self.flags())} <snapshot of {job.source}>/ "
                                       f"{self.ssh.rsync_path(job.target)}/")
            return self.report
        self._detect_gate()
        self._cleanup_views()
        snap = self.report.snapshot = S.take_snapshot(self.here, job.source, job.name, job.recursive, self.clock,
                                                      datasets=None if sel.whole else datasets,
                                                      left_out=[c.dataset for c in sel.excluded])
        self.datasets = list(datasets)
        root_mp = mounts[job.source]
        if not root_mp:
            raise RsyncError(f"{job.source} is not mounted (mountpoint none or legacy): rsync has nothing to read")
        for ds in datasets:
            if self.stop.is_set():
                raise RsyncError("stopped by request")
            mp = mounts[ds]
            rel = outside_why = None
            if not mp:
                outside_why = "its mountpoint is none or legacy"
            else:
                rel = os.path.relpath(mp, root_mp)
                if rel == ".." or rel.startswith("../") or (rel == "." and ds != job.source):
                    outside_why = f"it is mounted at {mp}, outside {job.source}'s tree at {root_mp}"
            if outside_why or rel is None:
                # its place under the target would be another directory (the live /var/www, the parent's
                # own files): never written there
                self.report.excluded.append(f"{ds} (not copied: {outside_why}; give it a job of its own)")
                self.datasets.remove(ds)
                continue
            dest = os.path.normpath(os.path.join(job.target, rel))
            # child datasets are copied on their own, or left out: their directories are never touched here
            children = [r for c, cm in mounts.items() if c.startswith(ds + "/") and cm
                        for r in [os.path.relpath(cm, mp)] if r != "." and not r.startswith("../") and r != ".."]
            with self._view(ds, snap) as view:
                self._rsync(view, dest, children)
        if job.snapshot_target:
            self._snapshot_target(snap)
        self._prune(snap)
        return self.report

    # -- pieces -------------------------------------------------------------------------------

    def _detect_gate(self) -> None:
        """A gated backup host (rebal gate --receive-into DS) takes an rsync server writing under DS's
        mount point only, with the paths on its command line (no --protect-args), and never prunes."""
        if self.ssh.local:
            return
        self.gate = gate_info(self.there)
        if self.gate is None:
            return
        mp = str(self.gate.get("mountpoint") or "")
        if self.gate.get("mode") != "receive" or not mp:
            raise RsyncError(f"{self.ssh.ep.host}: this key is gated ({self.gate.get('mode')} "
                             f"{self.gate.get('root')}) without a mount point to receive into")
        if self.job.target != mp and not self.job.target.startswith(mp.rstrip("/") + "/"):
            raise RsyncError(f"{self.ssh.ep.host}: this key is gated to {self.gate.get('root')} (mounted at {mp}); "
                             f"{self.job.target} is outside it")
        self.report.notes.append(f"the backup host is gated (rebal gate --receive-into {self.gate.get('root')}): "
                                 "retention of its snapshots is done there (rebal prune), not from here")
        self.report.notes.append("through the gate no device nodes, fifos or sockets are copied, and setuid/setgid "
                                 "bits and file capabilities are kept only where the backup's mount is nosuid "
                                 f"(zfs set setuid=off {self.gate.get('root')} there)")

    def flags(self) -> list[str]:
        gated = self.gate is not None
        # --protect-args would hide the destination from a gate's check: without it, rsync (3.2.4+)
        # escapes the path itself, and the gate splits it without a shell
        # a gate never lets a sender make device nodes or special files on the backup host: no -D there
        f = ["-rlptgoHAX" if gated else "-aHAX", "--numeric-ids", "--delete-delay", "--stats",
             *([] if gated else ["--protect-args"]), "--mkpath"]
        if self.job.snapshot_target:
            # rewrite changed blocks in place, so unchanged ones stay shared with the target's
            # snapshots (a cut transfer leaves the file partly updated; the next run finishes it)
            f.append("--inplace")
        else:
            f.append(f"--partial-dir={PARTIAL_DIR}")  # a cut file is kept and continued next time
        if self.job.bwlimit:
            f.append(f"--bwlimit={self.job.bwlimit}")
        return f

    def _mountpoint(self, ds: str) -> str | None:
        return self.here.mountpoint(ds)

    def _view(self, ds: str, snap: str):
        return SnapView(self.here, ds, snap, self.job.name, self.report.notes)

    def _cleanup_views(self) -> None:
        """Clones left by a run that died (only made where a ZFS has no .zfs directory)."""
        cleanup_views(self.here, self.job.source.split("/")[0], self.job.name)

    def _rsync(self, src_dir: str, dest: str, children: list[str]) -> None:
        argv = ["rsync", *self.flags(), *self.ssh.rsync_remote()]
        for c in children:  # child datasets are synced on their own; never delete their files here
            argv.append(f"--exclude=/{pattern_literal(c.strip('/'))}/*")
        argv += [src_dir.rstrip("/") + "/", self.ssh.rsync_path(dest.rstrip('/') + "/")]
        t0 = time.monotonic()
        res = run(argv, stop=self.stop, timeout=None, check=False)
        self.report.rsync_seconds += time.monotonic() - t0
        rc, out, err = res.returncode, res.stdout, res.stderr
        stats = parse_stats(out)
        self.report.bytes_sent += stats.get("bytes_sent", 0)
        self.report.bytes_expected += stats.get("bytes_expected", 0)
        self.report.files_transferred += stats.get("files_transferred", 0)
        if self.progress:
            self.progress(self.report.bytes_sent)
        if rc in (23, 24):
            files = warning_files(err)
            self.report.warnings.append(f"rsync exit {rc} (partial transfer or vanished files): " +
                                        ("; ".join(files[:20]) or err.strip()[-300:]))
            return
        if rc == 255:
            raise classify_ssh(self.ssh.ep, err)
        if rc != 0:
            if self.stop.is_set():
                raise RsyncError("stopped by request")
            last = [x for x in err.strip().splitlines() if x.strip()]
            raise RsyncError(f"rsync to {dest} failed (exit {rc}): {' '.join(last[-2:]) if last else ''}")

    def _snapshot_target(self, snap: str) -> None:
        """Snapshot the ZFS dataset that holds the target directory on the backup host."""
        root = self.gate["root"] if self.gate else None  # a gate lists only under its root
        try:
            mounts = self.there.filesystems(root)
        except HostError:
            mounts = {}
        best = None
        for name, mp in mounts.items():
            if mp.startswith("/") and (self.job.target == mp or self.job.target.startswith(mp.rstrip("/") + "/")):
                if best is None or len(mp) > len(best[1]):
                    best = (name, mp)
        if best is None:
            self.report.notes.append("snapshot_target: the target directory is not on a ZFS dataset; no snapshot taken")
            return
        self.there.snapshot([f"{best[0]}@{snap}"])
        self.report.target_snapshot = f"{best[0]}@{snap}"
        self.target_dataset = best[0]

    def _prune(self, snap: str) -> None:
        job = self.job.name
        tree = self.here.listing(self.job.source, self.job.recursive, bookmarks=False)
        having: dict[str, list[str]] = {}  # this job's snapshot -> the datasets that have it
        for d in sorted(tree):
            for s in tree[d]:
                if is_ours(s.name, job):
                    having.setdefault(s.name, []).append(d)
        # the last run's snapshot stays: `rebal verify` compares the backup with it (it pins data a
        # rebalance rewrites; the zfs mode, with bookmarks, keeps none)
        keep = retain([(n, snapshot_time(n)) for n in having], self.job.retention_source, {snap})
        drop = [n for n in having if n not in keep]
        # the guard (guard.py): @snap has just landed on the backup, so it is the base here
        for d in sorted(tree):
            v = guard.allowed(d, "source", tree[d], [n for n in drop if d in having[n]], base=snap)
            for n, why in v.refused.items():
                having[n].remove(d)
                self.report.notes.append(f"kept {d}@{n}, which retention would prune: {why}")
        drop = [n for n in drop if having[n]]
        failed = S.destroy_where_they_are(self.here, self.job.source, self.job.recursive,
                                          {n: having[n] for n in drop}, len(tree))
        for n in drop:
            if n in failed:
                self.report.notes.append(f"could not prune {self.job.source}@{n}: {failed[n]}")
            else:
                self.report.pruned_source.append(n)
        ds = self.target_dataset
        if ds and self.gate is None:
            every = self.there.snapshots(ds) or []
            tgt = [s for s in every if is_ours(s.name, job)]
            keep_t = retain([(s.name, snapshot_time(s.name)) for s in tgt], self.job.retention_target, {snap})
            v = guard.allowed(ds, "backup", every, [s.name for s in tgt if s.name not in keep_t], base=snap)
            gone = v.allowed
            self.report.notes.extend(f"kept {ds}@{n} on the backup host, which retention would prune: {why}"
                                     for n, why in v.refused.items())
            left = self.there.destroy_each(ds, gone) if gone else {}
            for name in gone:
                if name in left:
                    self.report.notes.append(f"could not prune {ds}@{name} on the backup host: {left[name]}")
                else:
                    self.report.pruned_target.append(name)
