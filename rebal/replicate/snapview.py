"""A directory showing a snapshot, on this host or on the backup host: `<mountpoint>/.zfs/snapshot/<snap>`
where the ZFS has it, else a read-only clone mounted in a private directory for as long as it is
needed (zfs-fuse has no `.zfs`). Clones are named `<pool>/rebal-view-<label>-<pid>-<n>` and a run
that died leaves nothing a later `cleanup_views` does not remove."""

from __future__ import annotations

import itertools
import os
import tempfile
import time

from ..process.command import run

VIEW_PREFIX = "rebal-view-"
_n = itertools.count()


class LocalView:
    def __init__(self, ds: str, snap: str, label: str, runner=run, notes: list | None = None) -> None:
        self.ds, self.snap, self.label, self._run = ds, snap, label, runner
        self.notes = notes if notes is not None else []
        self.clone = self.dir = None

    def __enter__(self) -> str:
        mp = self._run(["zfs", "get", "-H", "-o", "value", "mountpoint", self.ds]).stdout.strip()
        if mp.startswith("/"):
            snapdir = os.path.join(mp, ".zfs", "snapshot", self.snap)
            if os.path.isdir(snapdir):
                return snapdir
        pool = self.ds.split("/")[0]
        self.dir = tempfile.mkdtemp(prefix="rebal-view-")
        self.clone = f"{pool}/{VIEW_PREFIX}{self.label}-{os.getpid()}-{next(_n)}"
        self._run(["zfs", "clone", "-o", f"mountpoint={self.dir}", "-o", "readonly=on",
                   f"{self.ds}@{self.snap}", self.clone], readonly=False)
        note = "no .zfs/snapshot here: a read-only clone of the snapshot was read"
        if note not in self.notes:
            self.notes.append(note)
        return self.dir

    def __exit__(self, *exc) -> None:
        if self.clone:
            _destroy(lambda argv: self._run(argv, readonly=False, check=False), self.clone)
            try:
                os.rmdir(self.dir)
            except OSError:
                pass


class RemoteView:
    """The same on the backup host, through ssh."""

    def __init__(self, ssh, ds: str, snap: str, label: str, notes: list | None = None) -> None:
        self.ssh, self.ds, self.snap, self.label = ssh, ds, snap, label
        self.notes = notes if notes is not None else []
        self.clone = self.dir = None

    def __enter__(self) -> str:
        mp = self.ssh.run(["zfs", "get", "-H", "-o", "value", "mountpoint", self.ds]).stdout.strip()
        if mp.startswith("/"):
            snapdir = os.path.join(mp, ".zfs", "snapshot", self.snap)
            if self.ssh.run(["test", "-d", snapdir], check=False).returncode == 0:
                return snapdir
        pool = self.ds.split("/")[0]
        self.dir = self.ssh.run(["mktemp", "-d", "/tmp/rebal-view-XXXXXXXX"], readonly=False).stdout.strip()
        self.clone = f"{pool}/{VIEW_PREFIX}{self.label}-{os.getpid()}-{next(_n)}"
        self.ssh.run(["zfs", "clone", "-o", f"mountpoint={self.dir}", "-o", "readonly=on",
                      f"{self.ds}@{self.snap}", self.clone], readonly=False)
        note = "no .zfs/snapshot on the backup host: a read-only clone of the snapshot was read"
        if note not in self.notes:
            self.notes.append(note)
        return self.dir

    def __exit__(self, *exc) -> None:
        if self.clone:
            _destroy(lambda argv: self.ssh.run(argv, readonly=False, check=False), self.clone)
            self.ssh.run(["rmdir", self.dir], check=False)


def _destroy(run_fn, clone: str) -> None:
    for _ in range(50):  # zfs-fuse may call a just-used file system busy for a moment
        res = run_fn(["zfs", "destroy", "-f", clone])
        if res.returncode == 0 or "does not exist" in res.stderr:
            return
        time.sleep(0.1)


def cleanup_views(run_fn, pool: str, label: str) -> None:
    """Remove clones left by a run of ``label`` that died."""
    res = run_fn(["zfs", "list", "-H", "-o", "name", "-t", "filesystem", "-r", pool])
    for name in res.stdout.split():
        if name.startswith(f"{pool}/{VIEW_PREFIX}{label}-"):
            _destroy(run_fn, name)
