"""How a batch of copies is made durable before their renames, and the renames before the journal
forgets them: one barrier per batch instead of an fsync inside every copy.

- OpenZFS under Linux: syncfs(2) on a dataset runs zfs_sync(), which calls ``zil_commit(zilog, 0)``;
  object 0 means every object, so every pending write, create and setattr of the dataset is in the
  intent log when it returns. One call for the whole batch. Proven in the OpenZFS lane by power cuts
  of the guest inside batch windows (tests/openzfs/test_vm_powercut.py).
- Anywhere else (zfs-fuse, and any other file system): the copies are fsynced one after another once
  the whole batch is written. That is correct on every POSIX file system, and cheap on zfs-fuse,
  whose intent log commits every record up to the fsynced file's last one: the first fsync writes
  the log for the batch, the others find it written. syncfs(2) is no barrier there at all (FUSE does
  not pass it on: a file written and syncfs'd is lost when the daemon dies). Both proven by killing
  the zfs-fuse daemon (tests/integration/test_durability_zfs.py).

Which one runs (``per_batch``): the batch barrier where it is one call, on OpenZFS; an fsync inside
each copy elsewhere, since zfs-fuse already commits the fsyncs of the parallel workers together
(bench/rebalance.py measured batches at 0.91-0.95x the per-copy fsync there). ``REBAL_DURABILITY``
= ``batch`` or ``file`` chooses either anywhere (the crash tests and the benches use both).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Iterable

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


def per_batch(barrier: Barrier) -> bool:
    """Durability per batch, or an fsync inside each copy: REBAL_DURABILITY (batch, file) if set,
    else per batch where the barrier is one syncfs (OpenZFS)."""
    forced = os.environ.get("REBAL_DURABILITY", "")
    if forced in ("batch", "file"):
        return forced == "batch"
    return barrier.syncfs


def _fsync(fd: int) -> OSError | None:
    try:
        os.fsync(fd)
    except OSError as e:
        return e
    return None


class Barrier:
    """The durability calls of one directory's batches."""

    def __init__(self, dfd: int) -> None:
        self.dfd = dfd
        self.syncfs = fs_type(dfd) == ZFS_SUPER_MAGIC

    def copies(self, fds: list[int],
               map_: Callable[[Callable[[int], OSError | None], list[int]], Iterable[OSError | None]] = map) -> None:
        """Make the batch's copies (open descriptors of the temps) durable, or raise OSError.
        ``map_``: how the fsyncs are spread (a thread pool's map runs them at once)."""
        if not fds:
            return
        if self.syncfs:
            syncfs(fds[0])
            return
        errors = [e for e in map_(_fsync, fds) if e is not None]  # every fsync has ended here
        if errors:
            raise errors[0]

    def renames(self) -> None:
        """Make the batch's renames durable before the journal drops its rows: a power cut must not
        bring back a temp name that no journal row names. The directory's fsync commits its renames
        (on ZFS the intent log up to the last rename); syncfs commits the whole dataset. A failure
        here risks no data (every name holds a complete file); at worst a temp is left for the
        leftover clean-up of the next run (leftovers.py), so it is not raised."""
        try:
            (syncfs if self.syncfs else os.fsync)(self.dfd)
        except OSError:
            pass
