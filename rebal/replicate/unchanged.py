"""Datasets with nothing new since their last replicated point: no snapshot, no send, no round trip.

A tree of hundreds of datasets where a few changed overnight should cost a few sends, not hundreds.
Where the ZFS keeps the `written@SNAP` and `written#BOOKMARK` properties (OpenZFS; the latter with
the pool feature bookmark_written), one local `zfs get` over the tree says, per dataset, how many
bytes were written since its base (the newest point both sides have, which must be the target's
newest too). Zero: the backup already equals the source, and the dataset sits this run out
("unchanged", its base kept as the next one). Anything else, an error, or a ZFS without the
property (zfs-fuse): it is sent as always.

`written` counts only what a transaction group has synced: a file written a second before the run
is still dirty in memory and the property says 0 for it. The pool is synced first (`zpool sync`,
which a snapshot would do anyway); where it cannot be, nothing sits out.
"""

from __future__ import annotations

from .policy import Snap, newest_common


def bases_of(datasets: list[str], source_tree: dict[str, list[Snap]], target_tree: dict[str, list[Snap]],
             target_of) -> dict[str, Snap]:
    """Each dataset's base where it is also the target's newest snapshot (else the normal path
    decides: a target that moved on, or one that does not exist)."""
    out = {}
    for ds in datasets:
        tgt = target_tree.get(target_of(ds))
        src = source_tree.get(ds)
        if not tgt or not src:
            continue
        base = newest_common(src, tgt)
        if base is not None and max(tgt, key=lambda s: s.txg).guid == base.guid:
            out[ds] = base
    return out


def prop_of(base: Snap) -> str:
    return ("written#" if base.bookmark else "written@") + base.name


def query(source: str, recursive: bool, bases: dict[str, Snap]) -> list[str]:
    props = ",".join(sorted({prop_of(b) for b in bases.values()}))
    return ["zfs", "get", "-Hp", *(["-r", "-t", "filesystem,volume"] if recursive else []),
            "-o", "name,property,value", props, source]


def parse(text: str) -> dict[tuple[str, str], int]:
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip().isdigit():
            out[(parts[0], parts[1])] = int(parts[2])
    return out


def find_unchanged(source: str, recursive: bool, datasets: list[str], source_tree, target_tree, target_of,
                   runner) -> tuple[dict[str, Snap], str | None]:
    """(dataset -> its base, for those with no byte written since it; a note when the ZFS cannot say)."""
    bases = bases_of(datasets, source_tree, target_tree, target_of)
    if not bases:
        return {}, None
    pool = source.split("/", 1)[0]
    if runner(["zpool", "sync", pool], check=False).returncode != 0:
        return {}, f"could not sync pool {pool} to read what was written since the last run: every dataset is sent"
    res = runner(query(source, recursive, bases), check=False)
    if res.returncode != 0:
        return {}, "this ZFS cannot say what was written since the last run (no written@ property): every dataset is sent"
    written = parse(res.stdout)
    return {ds: b for ds, b in bases.items() if written.get((ds, prop_of(b))) == 0}, None
