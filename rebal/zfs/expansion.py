"""RAIDZ expansion (`zpool attach POOL raidzN-M DISK`, OpenZFS 2.3+): what `zpool status` says of it,
and what rewriting the old blocks returns. Pure functions.

Blocks written before an expansion keep the old data:parity ratio (a raidz1 of 3 disks stores 2
data sectors per parity sector; after a 4th disk, new blocks store 3). Rewriting such a block
stores it at the new ratio. In the space accounting ZFS uses (sizes deflated by the vdev's ratio
from its creation, which an expansion does not change), a file's `used` falls by the fraction
`reclaim_fraction` when it is rewritten: that is what `zfs get available` gains."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from .model import PoolStatus

_DONE = re.compile(r"expanded (\S+) copied .* on (\w{3} \w{3} +\d+ [\d:]+ \d{4})")
_RUNNING = re.compile(r"expansion of (\S+) in progress")


@dataclass(frozen=True, slots=True)
class Expansion:
    vdev: str
    done: bool
    ended: float | None  # epoch seconds (the host's local time, as zpool prints it)
    width_before: int  # disks before the last expansion (zpool status names only the last one)
    width_after: int
    parity: int

    @property
    def reclaim_fraction(self) -> float:
        return reclaim_fraction(self.width_before, self.width_after, self.parity)

    def as_dict(self) -> dict:
        return {"vdev": self.vdev, "done": self.done, "completed": self.ended, "width_before": self.width_before,
                "width_after": self.width_after, "parity": self.parity,
                "reclaim_fraction": round(self.reclaim_fraction, 4)}


def reclaim_fraction(w0: int, w1: int, parity: int) -> float:
    """Share of a block's accounted size that a rewrite at width w1 returns, for a block written at
    width w0: 1 - (w0 - p)/w0 * w1/(w1 - p). raidz1 3 -> 4 disks: 1 - 2/3 * 4/3 = 1/9."""
    if w0 <= parity or w1 <= parity or w1 <= w0:
        return 0.0
    return 1.0 - (w0 - parity) / w0 * w1 / (w1 - parity)


def raidz_asize(psize: int, width: int, parity: int, ashift: int) -> int:
    """What a raidz of ``width`` disks allocates for a block of ``psize`` bytes (vdev_raidz_asize):
    the data sectors, a parity sector per row, rounded up to a multiple of parity + 1 sectors."""
    sectors = ((psize - 1) >> ashift) + 1
    sectors += parity * ((sectors + width - parity - 1) // (width - parity))
    return -(-sectors // (parity + 1)) * (parity + 1) << ashift


def deflate_ratio(width: int, parity: int, ashift: int) -> int:
    """vdev_deflate_ratio: `used` counts (asize >> 9) * this; fixed when the vdev was made (an
    expansion does not change it)."""
    return (1 << 17) // (raidz_asize(1 << 17, width, parity, ashift) >> 9)


def parse_expansions(st: PoolStatus) -> list[Expansion]:
    """The expansion `zpool status` reports (running or done) with the vdev's widths."""
    out = []
    for m, done in ((_DONE.search(st.scan), True), (_RUNNING.search(st.scan), False)):
        if not m:
            continue
        name = m.group(1)
        ended = None
        if done:
            try:
                ended = time.mktime(time.strptime(re.sub(r" +", " ", m.group(2)), "%a %b %d %H:%M:%S %Y"))
            except ValueError:
                ended = None
        vdev = next((v for v in st.vdevs if v.name == name), None)
        width = len(vdev.leaves()) if vdev else 0
        pm = re.match(r"raidz(\d)", name)
        parity = int(pm.group(1)) if pm else 1
        out.append(Expansion(name, done, ended, max(width - 1, 0), width, parity))
    return out
