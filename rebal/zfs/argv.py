"""The zfs, zpool and zdb command lines rebal runs outside `ZfsHost`'s own methods (host.py and its
parts), built here so that every command line rebal sends to ZFS is written under rebal/zfs
(tests/unit/test_layers.py fails on one built anywhere else). Each returns an argument list for a
host's runner; none runs anything."""

from __future__ import annotations

from collections.abc import Sequence

from ..names import BACKUP_PROPERTY


def pool_names(pool: str | None = None) -> list[str]:
    """Every imported pool's name, or ``pool``'s alone (it fails where there is no such pool)."""
    return ["zpool", "list", "-H", "-o", "name", *([pool] if pool else [])]


def creation(names: Sequence[str]) -> list[str]:
    """`name<tab>seconds` of each snapshot or dataset."""
    return ["zfs", "get", "-Hp", "-o", "name,value", "creation", *names]


def snapshot_names(snaps: Sequence[str]) -> list[str]:
    """The names of those of ``snaps`` that exist."""
    return ["zfs", "list", "-H", "-o", "name", "-t", "snapshot", *snaps]


def properties(dataset: str, props: Sequence[str]) -> list[str]:
    """`property<tab>value` of each of ``props`` (exact numbers)."""
    return ["zfs", "get", "-Hp", "-o", "property,value", ",".join(props), dataset]


def iostat(pool: str, interval: int = 1) -> list[str]:
    """Per-vdev reads and writes every ``interval`` seconds, until killed."""
    return ["zpool", "iostat", "-v", pool, str(interval)]


def backup_listing(source: str, recursive: bool) -> list[str]:
    """The datasets a job may take and their rebal:backup property, in one command (zfs-fuse's
    `zfs get` has no -t)."""
    return ["zfs", "list", "-H", *(["-r"] if recursive else []), "-o", f"name,{BACKUP_PROPERTY}", "-t",
            "filesystem,volume", source]


def choices_written(source: str, recursive: bool, props: Sequence[str]) -> list[str]:
    """backup_listing with `written@SNAP` / `written#BOOKMARK` columns: a run's selection and what was
    written since its bases in one command ("-" where a dataset has no such snapshot or bookmark)."""
    return ["zfs", "list", "-Hp", *(["-r"] if recursive else []), "-t", "filesystem,volume",
            "-o", ",".join(["name", BACKUP_PROPERTY, *props]), source]


def written_since(source: str, recursive: bool, props: Sequence[str]) -> list[str]:
    """`written@SNAP` / `written#BOOKMARK` of ``source`` (and its file systems and volumes)."""
    return ["zfs", "get", "-Hp", *(["-r", "-t", "filesystem,volume"] if recursive else []),
            "-o", "name,property,value", ",".join(props), source]


def create_writable(dataset: str) -> list[str]:
    """A placeholder parent on a backup: writable, whatever its parent says (a receive goes under it)."""
    return ["zfs", "create", "-o", "readonly=off", dataset]


def zdb(args: Sequence[str]) -> list[str]:
    return ["zdb", *args]


# -- replication: snapshots, holds, bookmarks, streams (the replicator's sides run them) ----------


def snapshot(snaps: Sequence[str], recursive: bool = False) -> list[str]:
    """One atomic `zfs snapshot` of every name given (with -r: each one's children too)."""
    return ["zfs", "snapshot", *(["-r"] if recursive else []), *snaps]


def hold(tag: str, snaps: Sequence[str], recursive: bool = False) -> list[str]:
    return ["zfs", "hold", *(["-r"] if recursive else []), tag, *snaps]


def exists(name: str) -> list[str]:
    """Succeeds where ``name`` (a dataset, snapshot or bookmark) exists."""
    return ["zfs", "list", "-H", "-o", "name", "-t", "all", name]


def bookmark(snap: str, mark: str) -> list[str]:
    return ["zfs", "bookmark", snap, mark]


def destroy_bookmark(dataset: str, name: str) -> list[str]:
    return ["zfs", "destroy", f"{dataset}#{name}"]


def usage(command: str) -> list[str]:
    """zfs prints a subcommand's usage (its options) when it is given no argument."""
    return ["zfs", command]


def resume_tokens(roots: Sequence[str], recursive: bool) -> list[str]:
    """The receive_resume_token of every dataset under ``roots`` (of ``roots`` alone where not
    ``recursive``): a cut receive's state, to resume from."""
    return ["zfs", "get", "-Hp", *(["-r"] if recursive else []), "-t", "filesystem,volume", "-o", "name,value",
            "receive_resume_token", *roots]


def snapshot_marks(names: Sequence[str]) -> list[str]:
    """When the snapshots of each file system or volume named last changed (OpenZFS 2.2+: made,
    destroyed or renamed; seconds), with its receive_resume_token."""
    return ["zfs", "list", "-Hp", "-o", "name,snapshots_changed,receive_resume_token", "-t", "filesystem,volume",
            *names]


def datasets_named(names: Sequence[str]) -> list[str]:
    """Which of the file systems and volumes named exist (each that does, by name; none opened for
    its children or snapshots)."""
    return ["zfs", "list", "-H", "-o", "name", "-t", "filesystem,volume", *names]


def guids(names: Sequence[str]) -> list[str]:
    """The guid of each snapshot or bookmark named."""
    return ["zfs", "get", "-Hp", "-o", "name,value", "guid", *names]


def guid_txg(names: Sequence[str]) -> list[str]:
    """The guid and createtxg of each snapshot or bookmark named (any zfs: `zfs get`, not `list -p`)."""
    return ["zfs", "get", "-Hp", "-o", "name,property,value", "guid,createtxg", *names]


def send(snapshot: str, flags: Sequence[str], base: Sequence[str] = ()) -> list[str]:
    """`zfs send` of ``snapshot``; ``base``: the incremental part (`-I @snap` or `-i ds#bookmark`)."""
    return ["zfs", "send", *flags, *base, snapshot]


def send_resume(token: str, *, estimate: bool = False) -> list[str]:
    """The stream that resumes a cut receive from its token; ``estimate``: only say what it would send."""
    return ["zfs", "send", "-t", token, *(["-nvP"] if estimate else [])]






def allow(user: str, perms: Sequence[str], root: str) -> list[str]:
    """The delegation a gated key's user needs under ``root`` (the admin runs it)."""
    return ["zfs", "allow", "-u", user, ",".join(perms), root]


# what a gate asks of its own host around a command it lets through (ZfsHost's gate queries)
def receive_probe_x(target: str) -> list[str]:
    """A dry-run receive with -x (of a harmless property) that a gate feeds an empty stream: a usage
    error (exit 2) says this zfs's receive has no -x."""
    return ["zfs", "receive", "-n", "-x", "canmount", target]


def property_sources(props: Sequence[str], root: str) -> list[str]:
    """`name<tab>property<tab>source` of ``props`` on ``root`` and every dataset under it."""
    return ["zfs", "get", "-H", "-r", "-o", "name,property,source", ",".join(props), root]




def snapshot_list(dataset: str, recursive: bool) -> list[str]:
    """The names of ``dataset``'s snapshots (and its descendants' with ``recursive``)."""
    return ["zfs", "list", "-H", "-o", "name", "-t", "snapshot", *(["-r"] if recursive else ["-d", "1"]), dataset]


def guid(name: str) -> list[str]:
    return ["zfs", "get", "-Hp", "-o", "value", "guid", name]
