"""Walk the targets: which files can be rewritten, which are skipped and why.

Streams: memory grows with the number of directories, never with the number of files. Never follows
symlinks, never leaves the file system of the target (st_dev), never enters `.zfs`.
"""

from __future__ import annotations

import builtins
import fnmatch
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from .files import TEMP_PREFIX, FileRef, is_temp_name
from .planner import DirEntry

EXAMPLES = 5
_IFMT = 0o170000  # the file-type bits of st_mode (what stat.S_IFMT() keeps)
_IFDIR, _IFREG, _IFLNK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFLNK
AHEAD = 65536  # files listed and not yet rewritten, at most (a (name, lstat) pair is about 250 bytes)


@dataclass(frozen=True, slots=True)
class Filters:
    exclude: tuple[str, ...] = ()
    min_age_days: float = 0.0
    min_size: int = 0
    max_size: int | None = None
    now: float = field(default_factory=time.time)
    expanded_at: float | None = None  # a RAIDZ expansion completed then: older data is at the old ratio
    only_old: bool = False  # only files written before expanded_at (a reclaim after the expansion)
    only: frozenset | None = None  # only these files, as (st_dev, st_ino) (a refresh: those measured old)

    def excluded(self, rel: bytes) -> bool:
        if not self.exclude:
            return False
        text = os.fsdecode(rel)
        base = text.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatchcase(text, p) or fnmatch.fnmatchcase(base, p) for p in self.exclude)

    @property
    def plain(self) -> bool:
        """No size or age filter: every file passes ``wants``."""
        return not (self.min_size > 0 or self.max_size is not None or self.min_age_days or self.only is not None)

    def wants(self, st: os.stat_result) -> bool:
        if self.only is not None and (st.st_dev, st.st_ino) not in self.only:
            return False
        if st.st_size < self.min_size:
            return False
        if self.max_size is not None and st.st_size > self.max_size:
            return False
        if self.min_age_days and st.st_mtime > self.now - self.min_age_days * 86400:
            return False
        return True


@dataclass
class Skips:
    """What the scan leaves alone, with counts, bytes and a few examples each."""

    counts: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    temps: list[builtins.bytes] = field(default_factory=list)  # every rebal temp or anchor name found

    def add(self, kind: str, path: builtins.bytes, size: int = 0) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + size
        ex = self.examples.setdefault(kind, [])
        if len(ex) < EXAMPLES:
            ex.append(os.fsdecode(path))

    def merge(self, other: Skips) -> None:
        for k, n in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + n
            self.bytes[k] = self.bytes.get(k, 0) + other.bytes.get(k, 0)
            ex = self.examples.setdefault(k, [])
            ex.extend(other.examples.get(k, [])[: EXAMPLES - len(ex)])
        self.temps.extend(other.temps)


@dataclass
class ScanResult:
    dirs: list[DirEntry]
    files: int = 0
    bytes: int = 0
    largest: int = 0
    pinned_bytes: int = 0  # bytes of files older than the newest snapshot
    pinned_by: list[int] = field(default_factory=list)  # per snapshot (as given): bytes it also references
    skips: Skips = field(default_factory=Skips)
    groups: list[list[FileRef]] = field(default_factory=list)  # complete hardlink groups (--hardlinks)
    group_bytes: int = 0
    old_files: int = 0  # eligible files last written before the RAIDZ expansion (by their ctime)
    old_alloc: int = 0  # and the space they take
    # (name, lstat) of the eligible files of the first directories walked, up to ``keep`` files: an
    # in-place rewrite starts on these at once instead of listing them again (inplace_pass.eligible)
    listings: dict[builtins.bytes, list] = field(default_factory=dict)


def candidates(
    dirpath: bytes, root: bytes, dev: int, filters: Filters, skips: Skips | None = None, hardlinks_ok: bool = False
) -> Iterator[tuple[bytes, os.stat_result]]:
    """(name, lstat) of the files of one directory (not below it) that may be rewritten.

    Hardlinked files are skipped unless ``hardlinks_ok`` (an in-place rewrite keeps the links)."""
    try:
        it = os.scandir(dirpath)
    except OSError as e:
        if skips is not None:
            skips.add(f"unreadable directory ({e.strerror})", dirpath)
        return
    plain = filters.plain  # no size or age filter: wants() is not asked per file
    excl = bool(filters.exclude)
    expanded_at = filters.expanded_at if filters.only_old else None  # only files written before it
    with it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            fmt = st.st_mode & _IFMT
            if fmt == _IFDIR:
                continue
            name = entry.name
            if excl and filters.excluded(os.path.relpath(entry.path, root)):  # relpath is slow: only if asked
                if skips is not None:
                    skips.add("excluded", entry.path, st.st_size)
                continue
            if fmt != _IFREG:
                if skips is not None:
                    skips.add("symlink (left as it is)" if fmt == _IFLNK else "special file (socket, fifo or device)",
                              entry.path)
                continue
            if name.startswith(TEMP_PREFIX) and is_temp_name(name):  # (the call only where the prefix is: once a file)
                if skips is not None:
                    skips.add("rebal temp file", entry.path, st.st_size)
                    skips.temps.append(entry.path)
                continue
            if st.st_dev != dev:
                continue
            if st.st_nlink > 1 and not hardlinks_ok:
                if skips is not None:
                    skips.add("hardlinked", entry.path, st.st_size)
                continue
            if not plain and not filters.wants(st):
                if skips is not None:
                    skips.add("filtered (age or size)", entry.path, st.st_size)
                continue
            if expanded_at is not None and st.st_ctime >= expanded_at:
                if skips is not None:
                    skips.add("written since the RAIDZ expansion (already at the new ratio)", entry.path, st.st_size)
                continue
            yield name, st


def subdirs(dirpath: bytes, root: bytes, dev: int, filters: Filters, skips: Skips) -> list[bytes]:
    out: list[bytes] = []
    try:
        it = os.scandir(dirpath)
    except OSError:
        return out
    with it:
        for entry in it:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.name == b".zfs" and dirpath == root:
                continue
            if st.st_dev != dev:
                skips.add("other file system (not entered)", entry.path)
                continue
            if filters.exclude and filters.excluded(os.path.relpath(entry.path, root)):
                skips.add("excluded", entry.path)
                continue
            out.append(entry.path)
    return sorted(out)


def walk_dirs(root: bytes, dev: int, filters: Filters, skips: Skips) -> Iterator[bytes]:
    """Every directory under ``root`` (itself first), depth first, in name order."""
    stack = [root]
    while stack:
        d = stack.pop()
        yield d
        stack.extend(reversed(subdirs(d, root, dev, filters, skips)))


def scan(
    roots: list[bytes],
    filters: Filters,
    snapshot_times: list[float] | None = None,
    hardlinks_ok: bool = False,
    link_groups: bool = False,
    keep: int = 0,
) -> ScanResult:
    """Walk the targets. ``hardlinks_ok``: hardlinked files are ordinary candidates (in-place
    rewrite). ``link_groups``: collect the hardlink groups whose every name lies in the targets.
    ``snapshot_times``: creation times of the targets' snapshots, oldest first; a file last written
    before a snapshot was taken is referenced by it (and by every later one): its bytes stay
    allocated after a rewrite until those snapshots go (``pinned_by``, ``pinned_bytes``). ``keep``:
    the eligible files of the first directories are kept (``listings``) while they number at most
    this many."""
    from bisect import bisect_right

    res = ScanResult(dirs=[])
    times = list(snapshot_times or [])
    first = [0] * (len(times) + 1)  # bytes whose oldest referencing snapshot is times[i]
    links: dict[int, list[tuple[FileRef, int]]] = {}
    kept = largest = 0
    expanded_at = filters.expanded_at
    for root in roots:
        dev = os.lstat(root).st_dev
        for d in walk_dirs(root, dev, filters, res.skips):
            files = nbytes = alloc = 0
            listing: list | None = [] if kept < keep else None
            if link_groups:
                for name, st in _linked(d, root, dev, filters):
                    links.setdefault(st.st_ino, []).append((FileRef.from_stat(d, name, st), st.st_nlink))
            for name, st in candidates(d, root, dev, filters, res.skips, hardlinks_ok):
                if listing is not None:
                    listing.append((name, st))
                files += 1
                size = st.st_size
                nbytes += size
                used = st.st_blocks * 512
                taken = used if used and used < size else size
                alloc += taken
                if size > largest:
                    largest = size
                if times:  # what a snapshot keeps of the file is what it takes on disk
                    first[bisect_right(times, st.st_mtime)] += taken
                if expanded_at is not None and st.st_ctime < expanded_at:
                    res.old_files += 1
                    res.old_alloc += used
            if listing is not None:
                if kept + len(listing) <= keep:
                    res.listings[d] = listing
                    kept += len(listing)
                else:
                    kept = keep  # the rest are listed when they are rewritten
            if files:
                res.dirs.append(DirEntry(d, files, nbytes, alloc))
                res.files += files
                res.bytes += nbytes
    res.largest = largest
    acc = 0
    for i in range(len(times)):
        acc += first[i]
        res.pinned_by.append(acc)
    res.pinned_bytes = acc
    for members in links.values():
        nlink = members[0][1]
        if len(members) == nlink:
            res.groups.append([m[0] for m in members])
            res.group_bytes += members[0][0].size
    if link_groups:
        res.skips.counts.pop("hardlinked", None)
        res.skips.bytes.pop("hardlinked", None)
        res.skips.examples.pop("hardlinked", None)
        for members in links.values():
            if len(members) != members[0][1]:
                for ref, _n in members:
                    res.skips.add("hardlinked, with names outside the target", ref.path, ref.size)
    return res


def _linked(dirpath: bytes, root: bytes, dev: int, filters: Filters) -> Iterator[tuple[bytes, os.stat_result]]:
    """The regular files of one directory that have more than one name."""
    try:
        it = os.scandir(dirpath)
    except OSError:
        return
    with it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_dev == dev and not is_temp_name(entry.name)
                    and not (filters.exclude and filters.excluded(os.path.relpath(entry.path, root)))
                    and filters.wants(st)):
                yield entry.name, st
