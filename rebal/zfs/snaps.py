"""Snapshots and bookmarks as replication sees them (name, guid, createtxg), and the listings that
read them for a whole tree. Pure: text in, data out; the hosts that run the listings are in host.py.

Two listings give the same rows. `zfs list -Hp -t all -o name,guid,createtxg` is the fast one:
OpenZFS reads those three without opening each dataset and snapshot, which for a backup's received,
unmounted datasets is most of the cost (about 4x less time over 300 of them in the lane). zfs-fuse has
no `zfs list -p` nor guid in `zfs list`, so there `zfs get -Hp -o name,property,value guid,createtxg`
lists them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Snap:
    name: str  # the part after '@' (or after '#' for a bookmark)
    guid: int
    txg: int = 0
    bookmark: bool = False  # a bookmark of the source: an incremental base that pins no blocks

    def ref(self, dataset: str) -> str:
        return f"{dataset}{'#' if self.bookmark else '@'}{self.name}"


def parse_guid_txg(text: str) -> dict[str, dict[str, int]]:
    """`zfs get -Hp -o name,property,value guid,createtxg` -> name -> {guid, createtxg}."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip().isdigit():
            out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out


def parse_list(text: str) -> dict[str, dict[str, int]]:
    """`zfs list -Hp -o name,guid,createtxg` -> name -> {guid, createtxg}, as parse_guid_txg."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1].isdigit() and parts[2].isdigit():
            out[parts[0]] = {"guid": int(parts[1]), "createtxg": int(parts[2])}
    return out


def tokens_from(text: str) -> dict[str, str]:
    """dataset -> receive_resume_token, of those that have one, from `zfs get -o name,value
    receive_resume_token` or from the token lines of `zfs get -o name,property,value`."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 or (len(parts) >= 3 and parts[1] == "receive_resume_token"):
            value = parts[-1].strip()
            if value not in ("", "-"):
                out[parts[0]] = value
    return out


def snapshots_from(text: str, dataset: str, bookmarks: bool = False) -> list[Snap]:
    """Snapshots of ``dataset`` itself (not its children), oldest first; with ``bookmarks``, its
    bookmarks too (`zfs get` lists them where the ZFS has them)."""
    rows = parse_guid_txg(text)
    snaps = [
        Snap(n[len(dataset) + 1:], v.get("guid", 0), v.get("createtxg", 0), bookmark=n[len(dataset)] == "#")
        for n, v in rows.items()
        if n.startswith(dataset + "@") or (bookmarks and n.startswith(dataset + "#"))
    ]
    return sorted(snaps, key=lambda s: (s.txg, not s.bookmark))


def guid_query(*roots: str, recursive: bool = True, tokens: bool = False) -> list[str]:
    """Datasets, snapshots and bookmarks under ``roots`` (each with its children where ``recursive``,
    else its own snapshots and direct children) with guid and createtxg, and with ``tokens`` each
    dataset's receive_resume_token: any zfs."""
    return ["zfs", "get", "-Hp", *(["-r"] if recursive else ["-d", "1"]), "-o", "name,property,value",
            "guid,createtxg" + (",receive_resume_token" if tokens else ""), *roots]


def list_query(*roots: str, recursive: bool = True) -> list[str]:
    """The fast listing of what guid_query asks, tokens aside (OpenZFS: `zfs list -p`)."""
    return ["zfs", "list", "-Hp", "-t", "all", *(["-r"] if recursive else ["-d", "1"]), "-o",
            "name,guid,createtxg", *roots]


def tree_from(text: str, bookmarks: bool = False) -> dict[str, list[Snap]]:
    """Every dataset of a recursive guid query with its own snapshots (and, with ``bookmarks``, its
    bookmarks), oldest first."""
    return tree_of(parse_guid_txg(text), bookmarks)


def tree_of(rows: dict[str, dict[str, int]], bookmarks: bool = False) -> dict[str, list[Snap]]:
    """Rows of either listing (name -> guid, createtxg) as each dataset with its own snapshots (and,
    with ``bookmarks``, its bookmarks), oldest first."""
    out: dict[str, list[Snap]] = {n: [] for n in rows if "@" not in n and "#" not in n}
    for n, v in rows.items():
        sep = "@" if "@" in n else "#" if "#" in n else None
        if sep == "@" or (sep == "#" and bookmarks):
            ds, snap = n.split(sep, 1)
            out.setdefault(ds, []).append(Snap(snap, v.get("guid", 0), v.get("createtxg", 0), bookmark=sep == "#"))
    for snaps in out.values():
        snaps.sort(key=lambda s: (s.txg, not s.bookmark))
    return out


@dataclass
class Tree:
    """Datasets under a root with their snapshots (oldest first), and the resume tokens found."""

    snaps: dict[str, list[Snap]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def has(self, dataset: str, snap: str) -> bool:
        return any(s.name == snap and not s.bookmark for s in self.snaps.get(dataset, []))

    def guid(self, dataset: str, snap: str) -> int | None:
        return next((s.guid for s in self.snaps.get(dataset, []) if s.name == snap and not s.bookmark), None)
