"""rebal's own names left in a tree with no journal entry (a journal from before durable commits, a
state database that was lost or replaced): `.rebal-<ino>.tmp`, `.rebal-<ino>-<k>.tmp` (copies) and
`.rebal-<ino>.old` (the original's second name during a swap). Removed only where that is provably
safe; listed otherwise, never skipped silently."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

_NAME = re.compile(rb"^\.rebal-([0-9a-f]+)(?:-\d+)?\.(tmp|old)$")


@dataclass
class Cleanup:
    removed: list[str] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)  # (path, why it was left)


def open_paths() -> set[tuple[int, int]]:
    """(dev, ino) of every file some process has open (from /proc/*/fd)."""
    out: set[tuple[int, int]] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.add((st.st_dev, st.st_ino))
    return out


def clean(paths: list[bytes]) -> Cleanup:
    """A copy (`.tmp`) goes when the original it was made from (the inode in its name) is still in the
    same directory under a real name and nothing has the copy open: the swap never happened. An
    anchor (`.old`) goes when it is a second name of the file its directory still holds under a real
    name. Anything else stays, with the reason."""
    res = Cleanup()
    live = [p for p in paths if os.path.lexists(p)]
    if not live:
        return res
    busy = open_paths()
    by_dir: dict[bytes, dict[int, bytes]] = {}
    for p in live:
        d, name = os.path.split(p)
        m = _NAME.match(name)
        shown = os.fsdecode(p)
        if not m:
            res.left.append((shown, "not a name rebal makes"))
            continue
        ino, kind = int(m.group(1), 16), m.group(2)
        if d not in by_dir:
            by_dir[d] = _real_names(d)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            res.left.append((shown, "not a regular file"))
            continue
        if (st.st_dev, st.st_ino) in busy:
            res.left.append((shown, "a process has it open"))
            continue
        if kind == b"tmp":
            if ino not in by_dir[d]:
                res.left.append((shown, "the original it was copied from is not in this directory"))
                continue
            if st.st_ino == ino:
                res.left.append((shown, "it is the original itself"))
                continue
        else:
            if st.st_ino not in by_dir[d]:
                res.left.append((shown, "it is the only name of its file"))
                continue
        os.unlink(p)
        res.removed.append(shown)
    return res


def _real_names(d: bytes) -> dict[int, bytes]:
    """inode -> a name, of the directory's files that are not rebal's temp or anchor names."""
    out: dict[int, bytes] = {}
    try:
        with os.scandir(d) as it:
            for e in it:
                if not _NAME.match(e.name):
                    try:
                        out[e.inode()] = e.name
                    except OSError:
                        pass
    except OSError:
        pass
    return out
