"""Destroying many snapshots in few commands.

A command per snapshot makes pruning a long backlog cost a process and a transaction group per
snapshot. OpenZFS takes a comma list, `zfs destroy [-r] ds@a,b,c`, destroyed in one
transaction (lzc_destroy_snaps), all or none: a snapshot that cannot go (held, cloned, busy) keeps
the whole list; only the ones that cannot go are reported. (A range, `ds@a%b`, is slower: zfs
lists every snapshot of the dataset to resolve it.) zfs-fuse (and ZFS older than 2012) has no comma list: it
answers that `ds@a,b` does not exist (or is not a valid name), and the host is then asked one snapshot at a time for the rest
of the run.

A list is as long as the command line allows (CHUNK names, at most LINE bytes of them: a gate on the
other end reads lines of 64 KiB): a command, a process and a transaction group fewer for every list
(a backlog of 1,000 a side: 6 remote commands instead of 15). ZFS's own work dominates, and grows
with the snapshots older than the one destroyed (bench/RESULTS.md: the second thousand of 3,000 took
2.9x the first), so the length of the lists changed the time of that prune by nothing measurable.
A list that fails is split in halves, and each half tried again, down to the snapshots that cannot
go: a few of those among many cost a few commands each, not one command for every name.

Names are checked before any command is built."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import names
from ..errors import CommandFailed, RebalError
from ..process.command import Result

CHUNK = 1000  # snapshots per command at most
LINE = 48_000  # bytes of names per command at most (rebal's: some 27 KB for 1,000)
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
        for part in chunks(list(dict.fromkeys(snaps))):
            self._destroy(dataset, part, recursive, dry_run, failed)
        return failed

    def _destroy(self, dataset: str, part: list[str], recursive: bool, dry_run: bool,
                 failed: dict[str, str]) -> None:
        """``part`` in one command; where that fails, each half again (one at a time where this ZFS
        has no comma lists), down to the snapshots that cannot go, each said in ``failed``."""
        if len(part) > 1 and self.lists is False:
            for s in part:
                self._destroy(dataset, [s], recursive, dry_run, failed)
            return
        try:
            self.run(destroy_argv(dataset, part, recursive=recursive), readonly=False, dry_run=dry_run)
            if len(part) > 1:
                self.lists = True
            return
        except (CommandFailed, RebalError) as e:
            if len(part) == 1:
                failed[part[0]] = str(e)
                return
            if self.lists is None and any(w in str(e) for w in NO_LISTS):
                self.lists = False  # `ds@a,b` read as one name: this ZFS has no comma lists
        half = len(part) // 2  # one of them cannot go: the others still may
        self._destroy(dataset, part[:half], recursive, dry_run, failed)
        self._destroy(dataset, part[half:], recursive, dry_run, failed)


def chunks(todo: list[str]) -> list[list[str]]:
    """``todo`` in lists of at most CHUNK names and LINE bytes, in order."""
    out: list[list[str]] = []
    size = 0
    for s in todo:
        if not out or len(out[-1]) >= CHUNK or size + len(s) + 1 > LINE:
            out.append([])
            size = 0
        out[-1].append(s)
        size += len(s) + 1
    return out
