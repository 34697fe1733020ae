"""OpenZFS `zfs rewrite` (2.3.4+): rewrites a file's blocks in place, same inode, no temp copy.

Detection asks zpool for the pool's `physical_rewrite` feature and, where zpool does not know it,
zfs for its usage text; never a version number. `-P` (physical rewrite, keeps logical birth times
so incremental sends stay small) is used when the pool has that feature enabled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..zfs.host import ZfsHost


@dataclass(frozen=True, slots=True)
class RewriteSupport:
    available: bool
    physical: bool  # -P known to zfs and the feature enabled on the pool


def detect(host: ZfsHost, pool: str, features: dict[str, str] | None = None) -> RewriteSupport:
    """A zpool that knows the pool feature `physical_rewrite` is OpenZFS 2.4 or later, whose zfs
    (the same release) has `rewrite -P`: the feature's state alone decides there. Else zfs's usage
    text says whether it has `rewrite` (2.3.4) at all. ``features``: the pool's feature states as
    already read (`ZfsHost.pool_features`, with the others a run asks about: one process for all)."""
    from ..zfs.queries import REWRITE_FEATURE

    if features is None:
        features = host.pool_features(pool, (REWRITE_FEATURE,))
    feature = features.get(REWRITE_FEATURE, "")
    if feature:
        return RewriteSupport(True, feature != "disabled")
    has, has_p = host.rewrite_support()
    return RewriteSupport(has, False)
