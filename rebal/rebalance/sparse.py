"""Reading a file the way the copier does: data segments and holes (SEEK_DATA / SEEK_HOLE, where the
file system reports them), zeros hashed for the holes, and the offsets a size-only verify samples."""

from __future__ import annotations

import errno
import os
from typing import Protocol


class Hasher(Protocol):
    """What the copier's hash (xxhash) gives: bytes fed in, in order."""

    def update(self, data: memoryview, /) -> None: ...


CHUNK = 1 << 20
ZERO = bytes(CHUNK)
SEEK_DATA = getattr(os, "SEEK_DATA", 3)
SEEK_HOLE = getattr(os, "SEEK_HOLE", 4)


def next_data(fd: int, off: int, size: int) -> int:
    """Offset of the next data at or after ``off`` (``size`` if only a hole is left)."""
    try:
        return min(os.lseek(fd, off, SEEK_DATA), size)
    except OSError as e:
        if e.errno == errno.ENXIO:
            return size  # a hole up to the end
        return off  # SEEK_DATA not supported: treat everything as data


def next_hole(fd: int, off: int, size: int) -> int:
    """End of the data at ``off`` (``size`` where holes are not reported)."""
    try:
        return max(off + 1, min(os.lseek(fd, off, SEEK_HOLE), size))
    except OSError:
        return size


def hash_zeros(h: Hasher, n: int) -> None:
    zmv = memoryview(ZERO)
    while n > 0:
        k = min(n, CHUNK)
        h.update(zmv[:k])
        n -= k


def sample_offsets(size: int) -> list[int]:
    if size <= 4 * 65536:
        return list(range(0, size, 65536)) or [0]
    step = size // 5
    return [0, step, 2 * step, 3 * step, 4 * step, max(0, size - 65536)]
