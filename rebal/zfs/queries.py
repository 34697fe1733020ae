"""The command lines of the read-only queries a rebalance starts with, built in one place, and the
mount table's answer to "which dataset holds this directory". A `ZfsHost` (host_pool.py, host_fs.py)
runs these command lines; `prepare` runs the first ones at once, each a process of its own."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from .. import names
from ..errors import UsageError

MOUNTINFO = "/proc/self/mountinfo"


# the columns rebal reads, and `freeing`: the figures after a run and whether frees are still under
# way come in one process
POOL_COLUMNS = "name,size,allocated,free,freeing,health"


def pool_list_json(pools: Sequence[str], features: Sequence[str] = ()) -> list[str]:
    """Fill figures of the pools and their vdevs, JSON with integers (OpenZFS 2.3+), and the state
    of ``features`` (a zpool that does not know one says "-"): what a rebalance asks first, one process."""
    columns = POOL_COLUMNS + "".join(f",feature@{f}" for f in features)
    return ["zpool", "list", "-v", "-j", "--json-int", "-o", columns, *pools]


def pool_status(pools: Sequence[str]) -> list[str]:
    return ["zpool", "status", *pools]


def pool_features(pool: str, features: Sequence[str]) -> list[str]:
    """The state of each pool feature, one `feature@NAME<tab>STATE` line each; a zpool that does not
    know a feature leaves its line out (OpenZFS 2.4) or fails (older)."""
    return ["zpool", "get", "-H", "-o", "property,value", ",".join(f"feature@{f}" for f in features), pool]


PROPERTY = re.compile(r"[a-z][a-z0-9_:.-]*")


def snapshots_and(dataset: str, props: Sequence[str]) -> list[str]:
    """Creation and used of ``dataset``'s snapshots, and ``props`` of the dataset itself, in one `zfs get`."""
    for p in props:
        if not PROPERTY.fullmatch(p):
            raise ValueError(f"not a property name: {p!r}")
    return ["zfs", "get", "-Hp", "-r", "-o", "name,property,value", ",".join(["creation", "used", *props]), dataset]


def tree_creation(root: str) -> list[str]:
    """The creation time of every dataset and snapshot under ``root``, and the failover mark
    (names.FAILOVER_PROPERTY), in one `zfs get` (zfs-fuse's `zfs list` has no -p)."""
    return ["zfs", "get", "-Hp", "-r", "-o", "name,property,value", f"creation,{names.FAILOVER_PROPERTY}", root]


REWRITE_FEATURE = "physical_rewrite"
# enabled to start a RAIDZ expansion, and active from then on for the life of the pool (zpool-features(7)):
# while it is only enabled (or disabled) no vdev was ever expanded, and `zpool status` need not be asked
EXPANSION_FEATURE = "raidz_expansion"
SNAPSHOT_PROPS = ("dedup",)


def features(rewrite: bool) -> tuple[str, ...]:
    """The pool features a rebalance asks about: expansion, and `physical_rewrite` when the method
    may be `zfs rewrite`."""
    return (REWRITE_FEATURE, EXPANSION_FEATURE) if rewrite else (EXPANSION_FEATURE,)


def mounted_dataset(mountinfo: str, dev: int, path: str) -> tuple[str, str] | None:
    """(dataset, mountpoint) of the ZFS file system with device number ``dev`` that holds ``path``,
    from the text of /proc/self/mountinfo; None where no line says (zfs-fuse mounts as "fuse",
    snapshots are left to `zfs list`, a bind mount of a subdirectory is not the dataset's root)."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    best: tuple[str, str] | None = None
    for line in mountinfo.splitlines():
        f = line.split(" ")
        try:
            sep = f.index("-", 6)
            majmin, root, mp, fstype, source = f[2], f[3], _unescape(f[4]), f[sep + 1], _unescape(f[sep + 2])
        except (ValueError, IndexError):
            continue
        if fstype != "zfs" or majmin != want or root != "/" or "@" in source:
            continue
        if not (path == mp or path.startswith(mp.rstrip("/") + "/")):
            continue
        try:
            names.dataset(source)
        except UsageError:
            continue
        if best is None or len(mp) > len(best[1]):
            best = (source, mp)
    return best


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    if "\\" not in field:
        return field
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
