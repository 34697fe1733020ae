"""What a host's zfs can do, read from its usage texts and version, and what `zfs allow` gives a user."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Abilities:
    """What this host's zfs can do, from its usage texts (asked once per host and run)."""

    resumable: bool = False  # zfs receive -s / zfs send -t
    receive_u: bool = False  # receive without mounting
    receive_o: bool = False  # receive -o PROP=VALUE
    receive_x: bool = False  # receive -x PROP
    corrective: bool = False  # receive -c (OpenZFS 2.2+): heal damaged blocks from a stream
    raw: bool = False  # send -w
    props: bool = False  # send -p
    compressed: bool = False  # send -c
    large_blocks: bool = False  # send -L
    embedded: bool = False  # send -e


def flags(usage: str) -> set[str]:
    """The one-letter options a zfs usage text shows (`[-Fhnsuv]`, `[-o property=value]`, ...)."""
    out: set[str] = set()
    for group in re.findall(r"\[-([A-Za-z]+)", usage):
        out.update(group)
    return out


def delegations(text: str, user: str, groups: tuple[str, ...] = ()) -> set[str]:
    """Of `zfs allow DATASET`'s text: what applies to ``user`` on DATASET: its own local and
    local+descendent grants, and its parents' descendent and local+descendent ones (create-time
    permissions and set definitions are not grants)."""
    out: set[str] = set()
    block, section = 0, ""
    applies = {1: ("Local permissions", "Local+Descendent permissions"),
               2: ("Descendent permissions", "Local+Descendent permissions")}
    whom = {"everyone", f"user {user}"} | {f"group {g}" for g in groups}
    for line in text.splitlines():
        if line.startswith("---- Permissions on "):
            block, section = min(block + 1, 2), ""
        elif not line.startswith("\t"):
            section = line.strip().rstrip(":")
        elif block and section in applies[block]:
            parts = line.split()
            who = "everyone" if parts[0] == "everyone" else " ".join(parts[:2])
            if who in whom and len(parts) >= 2:
                out.update(parts[-1].split(","))
    return out
