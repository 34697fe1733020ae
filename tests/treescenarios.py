"""Trees of many datasets for replication at scale (issue 38), on zfs-fuse and in the lane."""

import os

from replscenarios import mountpoint
from zfsenv import sh


def make_wide_tree(pool: str, n: int, size: int = 20_000, root: str = "tree") -> list[str]:
    """``pool/root`` with ``n`` children, each with one file; the children's names, in order."""
    sh("zfs", "create", f"{pool}/{root}")
    kids = [f"{pool}/{root}/d{i:03d}" for i in range(n)]
    for k in kids:
        sh("zfs", "create", k)
        with open(os.path.join(mountpoint(k), "f"), "wb") as f:
            f.write(os.urandom(size))
    return kids


def touch(ds: str, name: str = "more", size: int = 10_000) -> None:
    with open(os.path.join(mountpoint(ds), name), "wb") as f:
        f.write(os.urandom(size))
