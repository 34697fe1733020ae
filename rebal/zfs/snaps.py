"""Snapshots and bookmarks as replication sees them (name, guid, createtxg), and the one listing
that reads them for a whole tree: `zfs get -Hp -o name,property,value guid,createtxg`. Pure: text in,
data out; the hosts that run the listing are in host.py."""

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


def guid_query(dataset: str, recursive: bool = True) -> list[str]:
    return ["zfs", "get", "-Hp", *(["-r"] if recursive else ["-d", "1"]), "-o", "name,property,value",
            "guid,createtxg", dataset]


def tree_from(text: str, bookmarks: bool = False) -> dict[str, list[Snap]]:
    """Every dataset of a recursive guid query with its own snapshots (and, with ``bookmarks``, its
    bookmarks), oldest first."""
    rows = parse_guid_txg(text)
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
