"""OpenZFS `zfs rewrite` (2.3.4+): rewrites a file's blocks in place, same inode, no temp copy.

Detection asks zfs (its usage text), not its version; `-P` (physical rewrite, keeps logical birth
times so incremental sends stay small) is used when zfs knows it and the pool has the
`physical_rewrite` feature enabled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_ARGS = 256
MAX_ARG_BYTES = 64 * 1024


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


def argv_batches(paths: list[bytes], physical: bool) -> list[list[str]]:
    """`zfs rewrite` command lines for these files, cut so no command line grows too long.

    Paths are absolute (they start with '/'), so none can be read as an option.
    """
    base = ["zfs", "rewrite"] + (["-P"] if physical else [])
    out: list[list[str]] = []
    cur: list[str] = []
    size = 0
    for p in paths:
        if not p.startswith(b"/"):
            raise ValueError("zfs rewrite needs absolute paths")
        s = os.fsdecode(p)
        if cur and (len(cur) >= MAX_ARGS or size + len(p) > MAX_ARG_BYTES):
            out.append(base + cur)
            cur, size = [], 0
        cur.append(s)
        size += len(p) + 1
    if cur:
        out.append(base + cur)
    return out
