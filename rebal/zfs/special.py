"""What a special vdev would take of a file if it were written now (docs/rebalancing.md, "To the special vdev"): ZFS puts a
block in the special class when it allocates it, by what it is (spa_preferred_class): every
indirect block (L1 and up: metadata), and a data block (L0) of a file whose physical size is at most
the dataset's `special_small_blocks`, while the special class holds less than 100 -
`zfs_special_class_metadata_reserve_pct` (25) percent of its space (the rest is kept for metadata).
Blocks written before the special vdev was added stay where they are until they are written again.

Pure parsers of `zdb -ddddd -bbbbbb DS OBJ...` (the full block pointer form) and the room figures;
the measurement that runs zdb is rebal/special.py."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .placement import object_blocks

_DVA = re.compile(r"DVA\[\d+\]=<(\d+):([0-9a-f]+):([0-9a-f]+)>")
_SIZE = re.compile(r"size=([0-9a-f]+)L/([0-9a-f]+)P")
RESERVE_PCT = 25  # zfs_special_class_metadata_reserve_pct's default


@dataclass
class Bound:
    """Allocated bytes of one file's blocks on the normal vdevs that a write now would put in the
    special class, and what the file allocates in all."""
    meta: int = 0  # indirect blocks (every copy)
    small: int = 0  # data blocks at or under special_small_blocks (every copy)
    alloc: int = 0  # every block of the file, wherever it is
    on_special: int = 0  # already there

    @property
    def total(self) -> int:
        return self.meta + self.small


def parse_bound(text: str, normal: set[int], small: int) -> dict[int, Bound]:
    """`zdb -ddddd -bbbbbb DS OBJ...` -> object id -> its Bound; ``normal``: the ids of the pool's
    normal top-level vdevs; ``small``: the dataset's special_small_blocks in bytes (0: none).
    Embedded blocks and holes allocate nothing."""
    out: dict[int, Bound] = {}
    for obj, _dblk, _offset, level, rest in object_blocks(text):
        b = out.setdefault(obj, Bound())
        if rest is None or "EMBEDDED" in rest:
            continue
        dvas = _DVA.findall(rest)
        size = _SIZE.search(rest)
        if not dvas or size is None:
            continue  # a hole
        psize = int(size.group(2), 16)
        for vdev, _off, asize in dvas:
            n = int(asize, 16)
            b.alloc += n
            if int(vdev) not in normal:
                b.on_special += n
            elif level > 0:
                b.meta += n
            elif small and psize <= small:
                b.small += n
    return out


def small_limit(value: str) -> int:
    """`zfs get -Hp special_small_blocks` -> bytes (0 where not set: metadata only)."""
    v = value.strip()
    return int(v) if v.isdigit() else 0


def room(space: int, alloc: int, reserve_pct: int = RESERVE_PCT) -> tuple[int, int]:
    """(bytes of metadata, bytes of small blocks) the special class can still take: metadata up to
    its end (past it ZFS writes metadata to the normal class), small blocks until it holds 100 -
    reserve percent of its space."""
    return max(0, space - alloc), max(0, space * (100 - reserve_pct) // 100 - alloc)
