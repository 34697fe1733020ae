"""Local ZFS operations for replication, behind one interface with two implementations:

- `LzcLocal`: pyzfs (`libzfs_core`), where the module imports and its C library loads;
- `CliLocal`: the zfs command, everywhere else (zfs-fuse, systems without pyzfs).

`local_backend()` picks the first that works. Both pass the same contract tests
(tests/integration/test_local_contract.py), run against every backend available on the machine.
Listing datasets and snapshots always uses the zfs command (libzfs_core has no listing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from types import ModuleType

from .. import names
from ..errors import CommandFailed, RebalError
from ..process.command import run
from ..zfs.cli import Runner
from ..zfs import argv as zargv
from ..zfs.destroy import CHUNK, Batches, destroy_argv, release_argv
from ..zfs.snaps import Snap, guid_query, parse_guid_txg, snapshots_from, tree_from  # noqa: F401 (re-exported)
from .policy import snapshot_name


class LocalError(RebalError):
    pass


class CliLocal:
    name = "zfs-cli"

    def __init__(self, runner: Runner = run) -> None:
        self._run = runner
        self.batches = Batches(runner)

    def snapshot(self, snaps: list[str], recursive: bool = False, dry_run: bool = False) -> None:
        """Take the snapshots in one atomic `zfs snapshot` (with -r: every child too)."""
        for s in snaps:
            names.snapshot(s)
        self._run(zargv.snapshot(snaps, recursive), readonly=False, dry_run=dry_run)

    def hold(self, tag: str, snaps: list[str], recursive: bool = False) -> None:
        self._run(zargv.hold(tag, snaps, recursive), readonly=False)

    def release(self, tag: str, snaps: list[str], recursive: bool = False) -> None:
        """Release a hold on each of ``snaps`` (CHUNK a command: zfs goes on past a snapshot without
        it); a hold that is not there is not an error."""
        for i in range(0, len(snaps), CHUNK):
            try:
                self._run(release_argv(tag, snaps[i:i + CHUNK], recursive=recursive), readonly=False)
            except CommandFailed as e:
                if "no such tag" not in e.stderr and "no such" not in e.stderr.lower():
                    raise

    def exists(self, name: str) -> bool:
        res = self._run(zargv.exists(name), check=False)
        return res.returncode == 0

    def bookmark(self, snap: str, bookmark: str) -> None:
        try:
            self._run(zargv.bookmark(snap, bookmark), readonly=False)
        except CommandFailed as e:
            if "unrecognized command" in e.stderr or "usage:" in e.stderr:
                raise LocalError("this ZFS has no bookmarks (OpenZFS 0.6.4+); holds keep the base instead") from None
            raise

    def destroy_snapshots(self, dataset: str, snaps: list[str], recursive: bool = False, dry_run: bool = False) -> None:
        for s in snaps:
            self._run(destroy_argv(dataset, [s], recursive=recursive), readonly=False, dry_run=dry_run)

    def destroy_each(self, dataset: str, snaps: list[str], recursive: bool = False,
                     dry_run: bool = False) -> dict[str, str]:
        """Destroy many snapshots in few commands (rebal/zfs/destroy.py); the ones that could not
        go, with why."""
        return self.batches.destroy(dataset, snaps, recursive=recursive, dry_run=dry_run)

    def destroy_bookmark(self, dataset: str, name: str) -> None:
        names.dataset(dataset)
        self._run(zargv.destroy_bookmark(dataset, name), readonly=False)


class LzcLocal(CliLocal):
    """pyzfs fast path: the same calls through libzfs_core, no process per call."""

    name = "libzfs_core"

    def __init__(self, lzc: ModuleType, runner: Runner = run) -> None:
        super().__init__(runner)
        self.lzc = lzc

    def snapshot(self, snaps: list[str], recursive: bool = False, dry_run: bool = False) -> None:
        for s in snaps:
            names.snapshot(s)
        if recursive:  # lzc_snapshot takes the full list; children are expanded by the CLI backend
            return super().snapshot(snaps, recursive, dry_run)
        if not dry_run:
            self.lzc.lzc_snapshot([s.encode() for s in snaps])

    def hold(self, tag: str, snaps: list[str], recursive: bool = False) -> None:
        if recursive:
            return super().hold(tag, snaps, recursive)
        self.lzc.lzc_hold({s.encode(): tag.encode() for s in snaps})

    def release(self, tag: str, snaps: list[str], recursive: bool = False) -> None:
        if recursive:
            return super().release(tag, snaps, recursive)
        try:
            self.lzc.lzc_release({s.encode(): [tag.encode()] for s in snaps})
        except Exception as e:  # pyzfs raises its own error classes
            if "NoSuch" not in type(e).__name__ and "not" not in str(e).lower():
                raise

    def exists(self, name: str) -> bool:
        if "#" in name:  # lzc_exists cannot see bookmarks (it answers False: seen on OpenZFS 2.4.4)
            return super().exists(name)
        return bool(self.lzc.lzc_exists(name.encode()))

    def bookmark(self, snap: str, bookmark: str) -> None:
        self.lzc.lzc_bookmark({bookmark.encode(): snap.encode()})


def destroy_where_they_are(local: CliLocal, root: str, recursive: bool, having: dict[str, list[str]],
                           datasets: int) -> dict[str, str]:
    """Destroy each snapshot name of ``having`` in the datasets listed for it: one `destroy -r` of
    the tree for the names all ``datasets`` have (a recursive job), one per dataset for the rest,
    each a comma list where the ZFS takes one. Returns the names not destroyed somewhere, with why."""
    whole = [n for n, where in having.items() if recursive and len(where) == datasets]
    failed = local.destroy_each(root, whole, recursive=True) if whole else {}
    per_ds: dict[str, list[str]] = {}
    for n, where in having.items():
        if n not in whole:
            for d in where:
                per_ds.setdefault(d, []).append(n)
    for d, ns in per_ds.items():
        for n, why in local.destroy_each(d, ns).items():
            failed.setdefault(n, f"{d}@{n}: {why}")
    return failed


def take_snapshot(local: CliLocal, source: str, job: str, recursive: bool, clock: Callable[[], datetime],
                  sleep: Callable[[float], None] = time.sleep, tries: int = 3,
                  avoid: frozenset[str] | set[str] = frozenset(), datasets: list[str] | None = None,
                  left_out: Sequence[str] = ()) -> str:
    """Snapshot ``source`` (and, ``recursive``, its children) as rebal-<job>-<UTC second>; the name.
    A run that follows another within the same second would take the same name: zfs refuses it
    ("dataset already exists") where the last run's snapshot is still on the source, and where it
    was pruned its bookmark and the backup's copy (names in ``avoid``) would clash later. Then wait
    for the next second and take that one. The snapshot is atomic, so a refused one made nothing;
    any other failure is raised as it is. ``datasets``: snapshot exactly these (one atomic command), not
    ``source`` recursively (a job that leaves some of its children out)."""
    for attempt in range(tries):
        when = clock()
        snap = snapshot_name(job, when)
        if snap not in avoid:
            try:
                if datasets is None:
                    local.snapshot([f"{source}@{snap}"], recursive=recursive)
                else:
                    _snapshot_some(local, source, snap, datasets, left_out)
                return snap
            except Exception:
                if attempt == tries - 1 or not local.exists(f"{(datasets or [source])[0]}@{snap}"):
                    raise
        sleep(1.001 - when.microsecond / 1e6)
    raise LocalError(f"no free snapshot name for {source} after {tries} tries (is the clock stuck?)")


def planned_snapshot(source: str, snap: str, recursive: bool, datasets: list[str] | None) -> str:
    """What take_snapshot would run, for a dry run's plan."""
    if datasets is None:
        return f"zfs snapshot {'-r ' if recursive else ''}{source}@{snap}"
    return "zfs snapshot " + " ".join(f"{d}@{snap}" for d in datasets)


def _snapshot_some(local: CliLocal, source: str, snap: str, datasets: list[str],
                   left_out: Sequence[str]) -> None:
    """Snapshot ``datasets`` at one instant: one `zfs snapshot a@s b@s ...`. A ZFS that takes one name
    per command (zfs-fuse: "too many arguments") gets the source's recursive snapshot, then the
    snapshot destroyed again on the datasets ``left_out`` (still one instant for the chosen ones)."""
    try:
        local.snapshot([f"{d}@{snap}" for d in datasets])
    except CommandFailed as e:
        if "too many arguments" not in e.stderr:
            raise
        local.snapshot([f"{source}@{snap}"], recursive=True)
        for d in left_out:
            local.destroy_snapshots(d, [snap])


def available_backends(runner: Runner = run) -> list[CliLocal]:
    """Every backend that works on this machine (the CLI one always; pyzfs where it loads)."""
    out: list[CliLocal] = []
    try:
        import libzfs_core as lzc  # noqa: PLC0415  (pyzfs, shipped with OpenZFS)

        lzc.lzc_exists(b"\x00")  # forces the C library to load
        out.append(LzcLocal(lzc, runner))
    except Exception:  # no pyzfs, or its library does not load (zfs-fuse has no libzfs_core)
        pass
    out.append(CliLocal(runner))
    return out


def local_backend(runner: Runner = run) -> CliLocal:
    return available_backends(runner)[0]


# -- reading, always through the zfs command ------------------------------------------------------


def local_tree(root: str, recursive: bool, runner: Runner = run, bookmarks: bool = False) -> dict[str, list[Snap]]:
    """The job's datasets (the root, and its children for a recursive job) with their snapshots:
    one `zfs get` for the whole tree."""
    tree = tree_from(runner(guid_query(root, recursive=recursive)).stdout, bookmarks)
    return {d: s for d, s in tree.items() if d == root or (recursive and d.startswith(root + "/"))}


def local_snapshots(dataset: str, runner: Runner = run, bookmarks: bool = False) -> list[Snap]:
    return snapshots_from(runner(guid_query(dataset, recursive=False)).stdout, dataset, bookmarks)
