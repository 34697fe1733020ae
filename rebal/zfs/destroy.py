"""Destroying many snapshots in few commands.

A command per snapshot makes pruning a long backlog cost a process and a transaction group per
snapshot. OpenZFS takes a comma list, `zfs destroy [-r] ds@a,b,c`, destroyed in one
transaction (lzc_destroy_snaps), all or none: a snapshot that cannot go (held, cloned, busy) keeps
the whole list. So a list that fails is destroyed again one snapshot at a time, and only the ones
that still fail are reported, as before. zfs-fuse (and ZFS older than 2012) has no comma list: it
answers that `ds@a,b` does not exist (or is not a valid name), and the host is then asked one snapshot at a time for the rest
of the run.

Names are checked before any command is built; a list holds at most CHUNK names, so the command
line stays short over ssh too."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import names
from ..errors import CommandFailed, RebalError
from ..process.command import Result

CHUNK = 100  # snapshots per command: about 5 KB of names with rebal's
# what a ZFS without comma lists says of `ds@a,b` (zfs-fuse: with -r, and without); the names were
# checked first, so nothing else in them can be wrong
NO_LISTS = ("does not exist", "invalid dataset name")


def destroy_argv(dataset: str, snaps: Sequence[str], *, recursive: bool = False) -> list[str]:
    return ["zfs", "destroy", *(["-r"] if recursive else []), f"{dataset}@{','.join(snaps)}"]


def release_argv(tag: str, refs: Sequence[str], *, recursive: bool = False) -> list[str]:
    return ["zfs", "release", *(["-r"] if recursive else []), tag, *refs]


class Batches:
    """Destroys through one runner (a host's), remembering whether its ZFS takes comma lists."""

    def __init__(self, run: Callable[..., Result]) -> None:
        self.run = run
        self.lists: bool | None = None  # None: not known yet (the first list of two or more tells)

    def destroy(self, dataset: str, snaps: Sequence[str], *, recursive: bool = False,
                dry_run: bool = False) -> dict[str, str]:
        """Destroy ``dataset@s`` for each of ``snaps`` (with ``recursive``, in every child that has it
        too) in as few commands as this ZFS allows. Returns the snapshots that could not be
        destroyed, with ZFS's reason; an empty dict when every one is gone."""
        names.dataset(dataset)
        for s in snaps:
            names.snapshot(f"{dataset}@{s}")
        failed: dict[str, str] = {}
        todo = list(dict.fromkeys(snaps))
        for i in range(0, len(todo), CHUNK):
            part = todo[i:i + CHUNK]
            if len(part) > 1 and self.lists is not False:
                try:
                    self.run(destroy_argv(dataset, part, recursive=recursive), readonly=False, dry_run=dry_run)
                    self.lists = True
                    continue
                except (CommandFailed, RebalError) as e:
                    if self.lists is None and any(w in str(e) for w in NO_LISTS):
                        self.lists = False  # `ds@a,b` read as one name: this ZFS has no comma lists
                    # else one of them cannot go: the others still may, one at a time
            for s in part:
                try:
                    self.run(destroy_argv(dataset, [s], recursive=recursive), readonly=False, dry_run=dry_run)
                except (CommandFailed, RebalError) as e:
                    failed[s] = str(e)
        return failed
