"""The seed's sector-size advice: a vdev whose ashift is below its disks' physical sector size
(a pool made with ashift=9 on disks of 4 KiB sectors) makes every smaller write a read-modify-write
inside the disk. Only a rebuild changes a vdev's ashift (`rebal rebuild`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from ..process.command import Result, run
from .placement import TopVdev


@dataclass(frozen=True)
class SectorMismatch:
    vdev: int
    type: str
    ashift: int
    physical: int  # bytes, the largest of its disks'
    disks: tuple[str, ...]


def physical_sector(path: str, runner: Callable[..., Result] = run) -> int | None:
    """A block device's physical sector size (lsblk, which also answers for a partition); None for a
    file vdev or what cannot be read."""
    try:
        real = os.path.realpath(path)
        if not stat.S_ISBLK(os.stat(real).st_mode):
            return None
    except OSError:
        return None
    res = runner(["lsblk", "-dno", "PHY-SEC", real], check=False)
    out = res.stdout.strip()
    return int(out) if res.returncode == 0 and out.isdigit() else None


def mismatches(tops: list[TopVdev], sector_of: Callable[[str], int | None]) -> list[SectorMismatch]:
    """The top-level vdevs whose sectors (1 << ashift) are smaller than a disk's physical sector."""
    out = []
    for t in tops:
        if not t.ashift:
            continue
        sizes = {p: sector_of(p) for p in t.leaves}
        big = max((v for v in sizes.values() if v), default=0)
        if big > 1 << t.ashift:
            out.append(SectorMismatch(t.id, t.type, t.ashift, big, tuple(p for p, v in sizes.items() if v == big)))
    return out
