"""The backup's side of a tree: backups whose source is gone or was renamed (kept, never destroyed),
and empty parents made for datasets chosen under one that is left out. ``rep``: the ZfsReplicator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .policy import Snap

if TYPE_CHECKING:
    from .zfs_run import Replicating


def find_orphans(rep: Replicating, datasets: list[str]) -> dict[str, list[Snap]]:
    """Backups whose source dataset is gone (destroyed or renamed): kept, never destroyed."""
    if not rep.job.recursive:
        return {}
    have = set(datasets)
    left_out = {c.dataset: c.why for c in rep.selection.excluded}
    out = {t: snaps for t, snaps in rep.target_tree.items()
           if t != rep.job.target and rep.source_of(t) not in have and t not in rep.report.placeholders}
    for t in sorted(out):
        src = rep.source_of(t)
        if src in left_out:
            if out[t]:  # (a placeholder parent has none: nothing to say)
                rep.report.notes.append(f"{t}: its source {src} is left out now ({left_out[src]}); the backup "
                                         "is kept as it is, no longer updated (rebal never destroys a backup dataset)")
        else:
            rep.report.notes.append(f"{t}: its source {src} is gone; the backup is kept "
                                     "(rebal never destroys a backup dataset)")
    return out


def make_parents(rep: Replicating, datasets: list[str], sent: set[str] | frozenset[str] = frozenset()) -> None:
    """A dataset chosen under one that is left out (or under a source left out itself) needs a
    parent on the target to be received into: made empty, once (a plain file system: the
    children's mount points are made in it, so it is not read-only as its received parent is).
    ``sent``: every dataset this run sends (a parent among them is received, not made: a dry run,
    which receives nothing, says the same as the run)."""
    chosen = set(datasets) | set(sent)
    for ds in datasets:
        chain = []
        p = ds
        while p != rep.job.source:
            p = p.rsplit("/", 1)[0]
            if p in chosen or rep.target_of(p) in rep.target_tree:
                break
            chain.append(rep.target_of(p))
        for t in reversed(chain):
            if t in rep.report.placeholders:
                continue
            rep.report.placeholders.append(t)
            rep.report.notes.append(f"{t}: made on the target as an empty parent for the datasets chosen "
                                     "under it; its own source is left out")
            if rep.dry_run:
                rep.report.planned.append(f"zfs create -o readonly=off {t}")
            else:
                rep.target.create_writable(t)
                rep.target_tree[t] = []


def renamed_from(rep: Replicating, ds: str, src: list[Snap], snap: str) -> str | None:
    """The orphaned backup that holds ``ds``'s older snapshots (same guid): ``ds`` was renamed."""
    guids = {s.guid for s in src if s.name != snap and s.guid}
    for t, tsnaps in sorted(rep.orphans.items()):
        if guids & {s.guid for s in tsnaps}:
            return t
    return None
