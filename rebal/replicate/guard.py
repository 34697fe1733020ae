"""The one guard every snapshot rebal destroys goes through, on either side.

Retention on the source and on the backup, the backup host's own `rebal prune`, the rsync mode's
retention, the snapshot verify made for itself and the snapshots taken by mistake on children a job
leaves out: each asks `allowed()` before it destroys, and destroys only what it allows. A rollback
(`zfs receive -F`, which destroys the backup's newer snapshots) asks `rollback_allowed()`.

What it refuses, unless the snapshot is named (``named``: the admin said so, or rebal made it a
moment ago and knows it holds nothing):
- on the backup, a dataset's newest snapshot: the last copy of what the dataset held when it was sent;
- on either side, the base (the newest snapshot both sides have: the next incremental's start), on
  the source only where no bookmark keeps the cursor;
- on either side, every snapshot newer than the base: the other side does not have it, so a block
  written after the base may be held there and nowhere else (a dataset whose replication fails, a
  backup restored from an older point, a send cut off) until an admin decides;
- where there is no base (no snapshot in common): everything; where the other side cannot be seen
  (the backup host's own `rebal prune`): on the backup only its newest, on the source everything.

It decides from the snapshots as they are (guids, creation txgs), not from what the caller believes
a run did: a wrong report of a run cannot make it destroy the only copy of something.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from ..zfs.snaps import Snap

SIDES = ("source", "backup")


@dataclass
class Verdict:
    allowed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # name: why


def base_of(snaps: Sequence[Snap], other: Sequence[Snap]) -> Snap | None:
    """The newest snapshot of ``snaps`` (one side's, of one dataset) whose guid the other side has (as
    a snapshot or, on a source, as a bookmark of it)."""
    there = {s.guid for s in other}
    common = [s for s in snaps if not s.bookmark and s.guid in there]
    return max(common, key=lambda s: s.txg) if common else None


def allowed(dataset: str, side: str, snaps: Sequence[Snap], drops: Iterable[str], *,
            other: Sequence[Snap] | None = None, base: str | None = None,
            named: Collection[str] = ()) -> Verdict:
    """Which of ``drops`` (snapshot names of ``dataset`` on ``side``) may be destroyed. ``snaps``: all of
    the dataset's snapshots and bookmarks on that side now. ``other``: the same dataset's on the other
    side, where it can be seen (the base is then found by guid); else ``base``: the name of the last
    snapshot known to have landed on the other side (the rsync mode's last run); else unknown."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}")
    real = sorted((s for s in snaps if not s.bookmark), key=lambda s: s.txg)
    by_name = {s.name: s for s in real}
    marks = {s.guid for s in snaps if s.bookmark}
    if other is not None:
        b = base_of(real, other)
    else:
        b = by_name.get(base) if base else None
    known = other is not None or base is not None  # else the other side cannot be seen from here
    newest = real[-1] if real else None
    v = Verdict()
    for name in dict.fromkeys(drops):
        s = by_name.get(name)
        why = ""
        if name in named:
            pass
        elif s is None:
            why = "no such snapshot"
        elif side == "backup" and s is newest:
            why = f"the newest snapshot of {dataset} on the backup: the last copy of what it holds"
        elif b is None:
            if side == "source" or known:
                why = (f"{dataset} has no snapshot known to be on both sides: nothing of it here is known to "
                       "be anywhere else")
        elif s.txg > b.txg:
            why = (f"newer than @{b.name}, the last snapshot {dataset} has on both sides: "
                   f"it is only on the {side} side")
        elif s is b and not (side == "source" and s.guid in marks):
            why = f"the base of {dataset}'s next incremental"
        if why:
            v.refused[name] = why
        else:
            v.allowed.append(name)
    return v


def rollback_allowed(source: str, target: str, named: Collection[str]) -> bool:
    """A receive -F of ``target`` (which destroys its snapshots newer than the base and what was
    written there) only where the admin named it, by its source's name or its own."""
    return source in named or target in named
