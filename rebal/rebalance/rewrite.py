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
    """The pool's feature is asked at the same time as zfs's usage text: two processes of about
    0.2 s each in the lane's guest, one after the other on every rewrite run's start (issue 19)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-query") as ex:
        feature = ex.submit(zpool.feature, pool, "physical_rewrite")
        has, has_p = zfs.rewrite_support()
        physical = feature.result() in ("enabled", "active")
    if not has:
        return RewriteSupport(False, False)
    return RewriteSupport(True, has_p and physical)
