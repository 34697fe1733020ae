"""How a batch of copies is made durable before their renames: one barrier for the batch where the
file system provably has one, else an fsync per copy (as before).

On OpenZFS under Linux, syncfs(2) on a dataset runs zfs_sync(), which calls
``zil_commit(zilog, 0)``: object 0 means every object, so every pending write, create and setattr of
the dataset is in the intent log (or a synced transaction group) when it returns. That is one
barrier for all the copies of a batch, and it is what rebal uses there. Proven in the OpenZFS lane by
power cuts (tests/openzfs/test_vm_powercut.py): the guest is killed inside batch windows and the tree
is whole after each.

Anywhere else the copier keeps its fsync per file. On zfs-fuse syncfs(2) returns at once without
reaching the daemon (the kernel sends FUSE no sync request: only virtiofs asks for one), so it is no
barrier at all; on other file systems rebal does not rely on one it has not tested.

``REBAL_DURABILITY`` = ``file`` or ``batch`` overrides the choice (``batch`` on a file system whose
syncfs is not a barrier keeps the crash guarantees of a killed process, not of a power cut: the
zfs-fuse crash tests use it to kill runs inside batch windows).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable

ZFS_SUPER_MAGIC = 0x2FC12FC1  # OpenZFS's Linux super block magic (zfs_vfsops.c)
_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def fs_type(fd: int) -> int | None:
    """The f_type of fstatfs(2) for ``fd`` (None where it cannot be read)."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on x86_64; f_type comes first
    if _c().fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def syncfs(fd: int) -> None:
    """syncfs(2) of the file system holding ``fd``; OSError on failure."""
    if _c().syncfs(fd) != 0:
        e = ctypes.get_errno() or errno.EIO
        raise OSError(e, os.strerror(e))


def batch_barrier(dfd: int) -> Callable[[int], None] | None:
    """The barrier that makes a whole batch of copies in directory ``dfd`` durable, or None where
    each copy must be fsynced on its own."""
    forced = os.environ.get("REBAL_DURABILITY", "")
    if forced == "file":
        return None
    if forced == "batch" or fs_type(dfd) == ZFS_SUPER_MAGIC:
        return syncfs
    return None


def after_swaps(dfd: int, barrier: Callable[[int], None] | None) -> None:
    """Make a batch's renames durable before the journal forgets its rows: a power cut must not bring
    back a temp name that no journal row names any more. The directory's fsync commits its renames
    (on ZFS, to the intent log); the barrier does the same for the whole dataset. A failure here
    risks no data (every name holds a complete file); at worst a temp is left for the leftover
    clean-up of the next run (leftovers.py), so it is not raised."""
    try:
        (barrier or os.fsync)(dfd)
    except OSError:
        pass
