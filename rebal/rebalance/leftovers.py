"""rebal's own names left in a tree with no journal entry (a journal from before durable commits, a
state database that was lost or replaced): `.rebal-<ino>.tmp`, `.rebal-<ino>-<k>.tmp` (copies) and
`.rebal-<ino>.old` (the original's second name during a swap). Removed only where that is provably
safe; listed otherwise, never skipped silently."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from dataclasses import dataclass, field

_NAME = re.compile(rb"^\.rebal-([0-9a-f]+)(?:-\d+)?\.(tmp|old)$")


@dataclass
class Cleanup:
    removed: list[str] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)  # (path, why it was left)


def open_paths() -> set[tuple[int, int]] | None:
    """(dev, ino) of every file some process has open (from /proc/*/fd); None when some process's
    descriptors cannot be read (no CAP_SYS_PTRACE over another user's process): then nothing is known."""
    out: set[tuple[int, int]] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except PermissionError:
            return None
        except OSError:
            continue  # the process ended
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.add((st.st_dev, st.st_ino))
    return out


def in_use(path: bytes) -> bool | None:
    """Whether some process has the file open, asked of the kernel: a write lease is granted only on
    a file nobody else has open (fcntl(2)), and needs no look into other processes (the units run
    without CAP_SYS_PTRACE). None where leases cannot tell (a file system without them; zfs-fuse has them)."""
    from .copier import F_SETLEASE, sigio_harmless

    if not sigio_harmless():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except BlockingIOError:
        return True  # another process holds a lease on it
    except OSError:
        return None
    try:
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_WRLCK)
    except OSError as e:
        return True if e.errno in (errno.EAGAIN, errno.EBUSY) else None
    else:
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)
        return False
    finally:
        os.close(fd)


def clean(paths: list[bytes]) -> Cleanup:
    """A copy (`.tmp`) goes when the original it was made from (the inode in its name) is still in the
    same directory under a real name and nothing has the copy open: the swap never happened. An
    anchor (`.old`) goes when it is a second name of the file its directory still holds under a real
    name. Anything else stays, with the reason."""
    res = Cleanup()
    live = [p for p in paths if os.path.lexists(p)]
    if not live:
        return res
    busy: set[tuple[int, int]] | None = None  # the /proc scan, where a lease cannot tell
    scanned = False
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
        used = in_use(p)
        if used is None:
            if not scanned:
                busy, scanned = open_paths(), True
            used = None if busy is None else (st.st_dev, st.st_ino) in busy
        if used is None:
            res.left.append((shown, "cannot tell whether a process has it open"))
            continue
        if used:
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
