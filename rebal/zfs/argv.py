"""The zfs, zpool and zdb command lines rebal runs outside `Zfs`, `Zpool` and `ZfsHost` (cli.py,
host.py), built here so that every command line rebal sends to ZFS is written under rebal/zfs
(tests/unit/test_layers.py holds the list of modules that still build their own). Each returns an
argument list for the process layer or a host's runner; none runs anything."""

from __future__ import annotations

from collections.abc import Sequence

BACKUP_PROPERTY = "rebal:backup"  # a dataset's own say in a recursive job (replicate/select.py)


def pool_names(pool: str | None = None) -> list[str]:
    """Every imported pool's name, or ``pool``'s alone (it fails where there is no such pool)."""
    return ["zpool", "list", "-H", "-o", "name", *([pool] if pool else [])]


def filesystem_names() -> list[str]:
    return ["zfs", "list", "-H", "-o", "name", "-t", "filesystem"]


def creation(names: Sequence[str]) -> list[str]:
    """`name<tab>seconds` of each snapshot or dataset."""
    return ["zfs", "get", "-Hp", "-o", "name,value", "creation", *names]


def snapshot_names(snaps: Sequence[str]) -> list[str]:
    """The names of those of ``snaps`` that exist."""
    return ["zfs", "list", "-H", "-o", "name", "-t", "snapshot", *snaps]


def properties(dataset: str, props: Sequence[str]) -> list[str]:
    """`property<tab>value` of each of ``props`` (exact numbers)."""
    return ["zfs", "get", "-Hp", "-o", "property,value", ",".join(props), dataset]


def pool_feature(pool: str, feature: str) -> list[str]:
    return ["zpool", "get", "-H", "-o", "value", f"feature@{feature}", pool]


def iostat(pool: str, interval: int = 1) -> list[str]:
    """Per-vdev reads and writes every ``interval`` seconds, until killed."""
    return ["zpool", "iostat", "-v", pool, str(interval)]


def sync(pool: str) -> list[str]:
    """Write out the open transaction group (`written` counts only synced ones)."""
    return ["zpool", "sync", pool]


def backup_listing(source: str, recursive: bool) -> list[str]:
    """The datasets a job may take and their rebal:backup property, in one command (zfs-fuse's
    `zfs get` has no -t)."""
    return ["zfs", "list", "-H", *(["-r"] if recursive else []), "-o", f"name,{BACKUP_PROPERTY}", "-t",
            "filesystem,volume", source]


def written_since(source: str, recursive: bool, props: Sequence[str]) -> list[str]:
    """`written@SNAP` / `written#BOOKMARK` of ``source`` (and its file systems and volumes)."""
    return ["zfs", "get", "-Hp", *(["-r", "-t", "filesystem,volume"] if recursive else []),
            "-o", "name,property,value", ",".join(props), source]


def create_writable(dataset: str) -> list[str]:
    """A placeholder parent on a backup: writable, whatever its parent says (a receive goes under it)."""
    return ["zfs", "create", "-o", "readonly=off", dataset]


def zdb(args: Sequence[str]) -> list[str]:
    return ["zdb", *args]


def zdb_config(pool: str) -> list[str]:
    """The pool's configuration as its cache file has it (vdev widths, ashift)."""
    return ["zdb", "-C", pool]
