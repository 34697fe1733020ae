"""OpenZFS `zfs rewrite` (2.3.4+): rewrites a file's blocks in place, same inode, no temp copy.

Detection asks zpool for the pool's `physical_rewrite` feature and, where zpool does not know it,
zfs for its usage text; never a version number. `-P` (physical rewrite, keeps logical birth times
so incremental sends stay small) is used when the pool has that feature enabled.
"""

from __future__ import annotations

from ..record import record


@record(frozen=True)
class RewriteSupport:
    available: bool
    physical: bool  # -P known to zfs and the feature enabled on the pool


def detect(zfs, zpool, pool: str) -> RewriteSupport:
    """A zpool that knows the pool feature `physical_rewrite` is OpenZFS 2.4 or later, whose zfs
    (the same release) has `rewrite -P`: the feature's state alone decides there. Else zfs's usage
    text says whether it has `rewrite` (2.3.4) at all. One zfs/zpool process at a run's start
    instead of two, each about 0.1 s of CPU in the lane's guest (issue 19)."""
    from ..zfs.queries import REWRITE_FEATURE

    feature = zpool.feature(pool, REWRITE_FEATURE)
    if feature in ("enabled", "active", "disabled"):
        return RewriteSupport(True, feature != "disabled")
    has, has_p = zfs.rewrite_support()
    return RewriteSupport(has, False)
