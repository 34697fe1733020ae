"""A directory showing a snapshot, on either host of a job (a ZfsHost: here, or over ssh):
`<mountpoint>/.zfs/snapshot/<snap>` where the ZFS has it, else a read-only clone mounted in a private
directory for as long as it is needed (zfs-fuse has no `.zfs`). Clones are named
`<pool>/rebal-view-<label>-<pid>-<n>` and a run that died leaves nothing a later `cleanup_views` does
not remove. One class for both ends: which end is the source and which the backup is the job's
direction (sides.job_hosts), not this module's."""

from __future__ import annotations

import itertools
import os

from .host import HostError, ZfsHost

VIEW_PREFIX = "rebal-view-"
_n = itertools.count()


class SnapView:
    def __init__(self, host: ZfsHost, ds: str, snap: str, label: str, notes: list | None = None) -> None:
        self.host, self.ds, self.snap, self.label = host, ds, snap, label
        self.notes = notes if notes is not None else []
        self.clone: str | None = None
        self.dir: str | None = None

    def __enter__(self) -> str:
        mp = self.host.mountpoint(self.ds)
        if mp:
            snapdir = os.path.join(mp, ".zfs", "snapshot", self.snap)
            if self.host.is_dir(snapdir):
                return snapdir
        pool = self.ds.split("/")[0]
        self.dir = self.host.private_dir("rebal-view-")
        self.clone = f"{pool}/{VIEW_PREFIX}{self.label}-{os.getpid()}-{next(_n)}"
        try:
            self.host.clone(f"{self.ds}@{self.snap}", self.clone, {"mountpoint": self.dir, "readonly": "on"})
        except BaseException:  # no clone, no view: the private directory goes too (__exit__ is not called)
            self.host.remove_dir(self.dir)
            raise
        note = (f"no .zfs/snapshot {'here' if self.host.local else 'on ' + self.host.where}: a read-only clone "
                "of the snapshot was read")
        if note not in self.notes:
            self.notes.append(note)
        return self.dir

    def __exit__(self, *exc: object) -> None:
        if self.clone:
            self.host.destroy_clone(self.clone)
            self.host.remove_dir(self.dir or "")


def cleanup_views(host: ZfsHost, pool: str, label: str) -> None:
    """Remove clones left by a run of ``label`` that died."""
    try:
        listed = host.filesystems(pool)
    except HostError:  # a tidy-up: the run itself says what is wrong with the pool
        return
    for name in listed:
        if name.startswith(f"{pool}/{VIEW_PREFIX}{label}-"):
            host.destroy_clone(name)
