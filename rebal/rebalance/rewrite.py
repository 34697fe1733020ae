"""OpenZFS `zfs rewrite` (2.3.4+): rewrites a file's blocks in place, same inode, no temp copy.

Detection asks zfs (its usage text), not its version; `-P` (physical rewrite, keeps logical birth
times so incremental sends stay small) is used when zfs knows it and the pool has the
`physical_rewrite` feature enabled.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RewriteSupport:
    available: bool
    physical: bool  # -P known to zfs and the feature enabled on the pool


def detect(zfs, zpool, pool: str) -> RewriteSupport:
    has, has_p = zfs.rewrite_support()
    if not has:
        return RewriteSupport(False, False)
    physical = has_p and zpool.feature(pool, "physical_rewrite") in ("enabled", "active")
    return RewriteSupport(True, physical)
