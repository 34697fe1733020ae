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

The backup's side of that question costs the most on a big tree: received backups are unmounted, and
listing all their snapshots is most of a run's time on a tree of hundreds. So a run first asks
rebal's own record of what landed (state.replica_points): where every chosen dataset's base is the
snapshot the record says reached the backup, that base is still the source's newest point of this
job (no run was cut since), and no byte was written since it, nothing is to be sent. The backup
host is still asked, every run, in one command sent first and answered while the source lists its
own (the selection, the listing, `zpool sync` and the `written@` query): the guid of each snapshot
the record says landed (`zfs get guid T1@BASE T2@BASE ...`, one name a dataset). Asking the backup's
`snapshots_changed` instead, which would prove the same without naming snapshots, was measured and
is slower: 6.5-9.0 s for 100 received datasets against 1.2-2.0 s for their bases' guids (OpenZFS
2.4.4 under TCG, 2026-12-07: reading any property of an unmounted received dataset opens it). A base that is
gone or is another snapshot by that name (the backup rolled back, destroyed or received into behind
rebal's back) sends the run down the normal path, which lists both sides and sends what the backup
lacks: noticed by the next run, not an hour later. Any dataset with something new or no record,
and the run lists both sides as always.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .policy import Snap, is_ours, newest_common
from .select import Selection, select

if TYPE_CHECKING:
    from ..zfs.host import ZfsHost
    from .zfs_run import Replicating


def bases_of(datasets: list[str], source_tree: dict[str, list[Snap]], target_tree: dict[str, list[Snap]],
             target_of: Callable[[str], str]) -> dict[str, Snap]:
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


def props_of(bases: dict[str, Snap]) -> list[str]:
    """The `written@SNAP`/`written#BOOKMARK` properties that say what was written since each base."""
    return sorted({prop_of(b) for b in bases.values()})


def find_unchanged(source: str, recursive: bool, datasets: list[str], source_tree: dict[str, list[Snap]],
                   target_tree: dict[str, list[Snap]], target_of: Callable[[str], str],
                   host: ZfsHost) -> tuple[dict[str, Snap], str | None]:
    """(dataset -> its base, for those with no byte written since it; a note when the ZFS cannot say)."""
    bases = bases_of(datasets, source_tree, target_tree, target_of)
    if not bases:
        return {}, None
    pool = source.split("/", 1)[0]
    if not host.sync(pool):
        return {}, f"could not sync pool {pool} to read what was written since the last run: every dataset is sent"
    written = host.written_since(source, recursive, props_of(bases))
    if written is None:
        return {}, "this ZFS cannot say what was written since the last run (no written@ property): every dataset is sent"
    return {ds: b for ds, b in bases.items() if written.get((ds, prop_of(b))) == 0}, None


def record_bases(datasets: list[str], source_tree: dict[str, list[Snap]], landed: dict[str, str],
                 job: str) -> dict[str, Snap]:
    """Each dataset's base by the record: the snapshot that landed, where it is still the source's
    newest snapshot or bookmark of this job (a snapshot wins over its bookmark)."""
    out = {}
    for ds in datasets:
        ours = [s for s in source_tree.get(ds, []) if is_ours(s.name, job)]
        if ds not in landed or not ours:
            continue
        newest = max(ours, key=lambda s: (s.txg, not s.bookmark))
        if newest.name == landed[ds]:
            out[ds] = newest
    return out


@dataclass
class ByRecord:
    """What rebal's record and one question to the backup say about a run."""

    same: dict[str, Snap]  # dataset -> its base: the backup holds it and nothing was written since
    bases: dict[str, Snap]  # every dataset whose recorded base the backup holds (``same`` among them)
    listed: list[str]  # the backup's datasets the run lists with their snapshots: the others, and
    # backups whose source is no longer chosen (the orphan and rename checks' part)
    parents: list[str]  # and those it asks only whether they are there: the others' parents


def recorded_names(rep: Replicating) -> list[str]:
    """The backup's name of each snapshot rebal's record says landed there for this job: asked by
    guid before the source is listed (the bases a run checks are among them), so the backup's answer
    travels while this side lists its own."""
    root, under = rep.job.source, rep.job.source + "/"
    return sorted(f"{rep.target_of(ds)}@{snap}" for ds, snap in rep.landed.items() if ds == root or ds.startswith(under))


MANY_NAMES = 8  # recorded base names beyond which what was written is asked apart (two columns a name)


def first_questions(rep: Replicating) -> tuple[Selection, dict[str, list[Snap]], ByRecord | None]:
    """A run with a record begins with its questions at once: the backup's guids of what landed
    (recorded_names), asked first, travel while this side asks its own, one after another (two zfs
    listings at once took longer than one after the other, measured): `zpool sync`, then the
    selection's listing with what was written since each recorded base as columns of it (and
    `snapshots_changed` where source_record has a record), then the snapshots and bookmarks, unless
    the source's record stands for them; by_record then reads the answers. (selection, the source's
    listing, the plan or None.)"""
    from . import source_record as SR

    names = sorted({snap for ds, snap in rep.landed.items() if ds == rep.job.source
                    or ds.startswith(rep.job.source + "/")})
    props = [p for n in names for p in (f"written@{n}", f"written#{n}")] if len(names) <= MANY_NAMES else []
    rec = SR.load(rep) if props else None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebal-bases") as ex:
        held = ex.submit(rep.target.guids, recorded_names(rep))  # the backup's answer, beside this side's work
        synced = rep.source.sync(rep.job.source.split("/", 1)[0])
        read_at = time.time()
        both = rep.source.choices_written(rep.job.source, rep.job.recursive,
                                          props + ([SR.PROPERTY] if rec else [])) if synced and props else None
        if rec and synced and both is None:
            SR.forget(rep)
        rep.selection = select(rep.job, rep.source, both[0] if both else None)
        included = rep.selection.included
        kept = SR.stands(rep, rec, included, both[1]) if rec and both else None
        if kept is not None and all_held(rep, kept, held.result()):
            plan = by_record(rep, kept, held.result, lambda _: both[1] if both else None)
            if plan is not None and len(plan.same) == len(included):  # a run to send lists, always
                rep.report.source_recorded = len(kept)  # the source's listing not asked
                return rep.selection, kept, plan
        marks = SR.marks_in(both[1]) if rec and both else None
        if marks is None and SR.worth_marking(rep, included, both[1] if both else None):
            read_at = time.time()
            marks = SR.marks_of(rep, included)
        tree = rep.source.listing(rep.job.source, rep.job.recursive)

        def written(bases: dict[str, Snap]) -> dict[tuple[str, str], int] | None:
            if not synced:
                return None
            return both[1] if both else rep.source.written_since(rep.job.source, rep.job.recursive, props_of(bases))

        plan = by_record(rep, tree, held.result, written)
        if marks and plan is not None:
            SR.keep(rep, marks, read_at, plan.same, included)
        return rep.selection, tree, plan


def all_held(rep: Replicating, tree: dict[str, list[Snap]], guids: dict[str, int]) -> bool:
    """Whether the backup holds each dataset's base in ``tree`` (its only point) by name and guid."""
    return all(guids.get(f"{rep.target_of(ds)}@{snaps[-1].name}") == snaps[-1].guid for ds, snaps in tree.items())


def by_record(rep: Replicating, tree: dict[str, list[Snap]], held: Callable[[], dict[str, int]],
              written_since: Callable[[dict[str, Snap]], dict[tuple[str, str], int] | None]) -> ByRecord | None:
    """Which chosen datasets sit the run out by rebal's record (``rep``: the ZfsReplicator, whose
    ``landed`` says what landed): those whose recorded base the backup still holds (``held``: the
    backup's guids of what landed, by name) and that had nothing written since (``written_since``
    of the bases: None where the pool could not be synced or this ZFS cannot say); and which part
    of the backup the run must list for the others. None (list both sides whole) where the record is
    of no use: no dataset has one, nothing can say what was written, or the backup lost a base
    behind rebal's back."""
    datasets = rep.selection.included
    bases = record_bases(datasets, tree, rep.landed, rep.job.name)
    if not bases:
        return None
    there = {f"{rep.target_of(ds)}@{b.name}": b.guid for ds, b in bases.items()}
    written = written_since(bases)
    guids = held()
    lost = sorted(name for name, guid in there.items() if guids.get(name) != guid)
    if lost:
        rep.report.notes.append(f"the backup no longer holds {len(lost)} base(s) the last run left there "
                                f"({', '.join(lost[:3])}{' ...' if len(lost) > 3 else ''}): rolled back, destroyed "
                                "or replaced behind rebal's back; the backup is listed and what it lacks is sent")
        return None
    if written is None:
        return None
    same = {ds: b for ds, b in bases.items() if written.get((ds, prop_of(b))) == 0}
    return ByRecord(same, bases, *part_to_list(rep, [d for d in datasets if d not in same]))


def part_to_list(rep: Replicating, others: list[str]) -> tuple[list[str], list[str]]:
    """The backup's datasets a run with ``others`` to send must see with their snapshots: theirs, and
    the backups of datasets that landed once and are chosen no more (gone, renamed or left out: kept,
    and said so); and those it must only know to be there: their parents up to the job's root (an
    empty parent is made only where none is). A parent is not listed with its snapshots: that
    listing would also open each of its children (the job's root: every dataset of the tree)."""
    root = rep.job.target
    chosen = set(rep.selection.included)
    under = rep.job.source + "/"
    deep = {rep.target_of(ds) for ds in others}
    deep.update(rep.target_of(d) for d in rep.landed if d not in chosen and d.startswith(under))
    parents: set[str] = set()
    for t in deep:
        while t != root and "/" in t:
            t = t.rsplit("/", 1)[0]
            if t in parents:
                break
            parents.add(t)
    return sorted(deep), sorted(parents - deep)
