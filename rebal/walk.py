"""Walking a tree for its regular files (no links followed), the one way rebal does it outside the
rebalance scan (which has its own rules: filters, skips, hardlink groups)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator


def regular_files(root: bytes, one_fs: bool = False) -> Iterator[tuple[bytes, os.stat_result]]:
    """(path, lstat) of every regular file below ``root``; with ``one_fs``, not below other file
    systems mounted inside it, nor in `.zfs`."""
    dev = os.lstat(root).st_dev if one_fs else None
    for d, dirs, files in os.walk(root):
        if one_fs:
            dirs[:] = [x for x in dirs if x != b".zfs" and os.lstat(os.path.join(d, x)).st_dev == dev]
        for f in files:
            p = os.path.join(d, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue  # gone since it was listed
            if stat.S_ISREG(st.st_mode) and (dev is None or st.st_dev == dev):
                yield p, st
