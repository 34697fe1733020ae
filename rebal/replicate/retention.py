"""What keeps the next incremental's base, and retention of a zfs job's snapshots and bookmarks.

The cursor: after a dataset is sent, its new snapshot is the next base. Where the source has
bookmarks (OpenZFS), a bookmark `ds#<snapshot name>` marks it: a bookmark holds no blocks, so the
source snapshot itself may go (retention on the source may be zero snapshots) and a rebalance of the
source is not pinned by replication. Where it has none (zfs-fuse), the snapshot is held
(`zfs hold rebal-<job>`) so nothing destroys it, and retention keeps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CommandFailed, RebalError
from ..outcome import Outcome
from ..zfs.host import NoBookmarks
from . import guard
from .backup_record import confirmed
from .source_snaps import destroy_where_they_are
from .policy import Buckets, Snap, is_ours, retain, snapshot_time

if TYPE_CHECKING:
    from .zfs_run import Replicating


def keep_cursor(rep: Replicating, ds: str, snap: str, old_base: Snap | None) -> str:
    """Mark ``ds@snap`` as the next base; release what kept the old one. ``rep`` is the
    ZfsReplicator (its source host, job and report). Returns "bookmark" or "hold" ("" if neither
    could be made: the next run then finds the base by guid on both sides, as before)."""
    tag = f"rebal-{rep.job.name}"
    if rep.bookmarks:
        try:
            rep.source.bookmark(f"{ds}@{snap}", f"{ds}#{snap}")
            if old_base is not None and not old_base.bookmark:
                rep.source.release(tag, [f"{ds}@{old_base.name}"])  # held by an earlier run
            return "bookmark"
        except NoBookmarks:
            rep.bookmarks = False  # this ZFS has none: holds from now on
        except Exception as e:  # noqa: BLE001 - the CLI's or pyzfs's error (a pool without the feature): hold
            rep.report.notes.append(f"{ds}: could not bookmark the new base ({e}); it is held instead")
    try:
        rep.source.hold(tag, [f"{ds}@{snap}"])
        if old_base is not None and not old_base.bookmark and old_base.name != snap:
            rep.source.release(tag, [f"{ds}@{old_base.name}"])
        return "hold"
    except (CommandFailed, RebalError) as e:
        rep.report.notes.append(f"{ds}: could not hold the base snapshot: {e}")
        return ""


def drops_per_dataset(tree: dict[str, list[Snap]], job: str, buckets: Buckets, *, protect: set[str],
                      bases: dict[str, str | None], settled: set[str], newest: bool) -> dict[str, list[str]]:
    """Per dataset of ``tree``, this job's snapshots to destroy. A tree's restore point is per
    dataset (one with nothing written gets no snapshot in a run, so the newest names differ), so
    retention is too: each dataset keeps what the policy keeps of its own snapshots, every name in
    ``protect``, its newest where ``newest`` (on the backup: the last copy of what it holds), and,
    where its replication did not land this run (not in ``settled``), everything from its base up
    (everything, when its base is unknown) until an admin decides."""
    drop: dict[str, list[str]] = {}
    for ds, snaps in tree.items():
        # by the time in their names: a tree kept up to date through the run holds the source's txgs
        # for what it just received, which are not the backup pool's
        mine = sorted((s for s in snaps if not s.bookmark and is_ours(s.name, job)),
                      key=lambda s: (snapshot_time(s.name), s.txg))
        if not mine:
            continue
        keep = retain([(s.name, snapshot_time(s.name)) for s in mine], buckets, protect)
        if newest:
            keep.add(mine[-1].name)
        if ds not in settled:
            base = bases.get(ds)
            at = next((i for i, s in enumerate(mine) if s.name == base), 0)  # not found: keep them all
            keep.update(s.name for s in mine[at:])
        gone = [s.name for s in mine if s.name not in keep]
        if gone:
            drop[ds] = gone
    return drop


def prune(rep: Replicating, datasets: list[str]) -> None:
    """Destroy this job's snapshots that the retention policy does not keep, on both sides, per
    dataset (drops_per_dataset), and its cursor bookmarks older than each dataset's newest. Never a
    base still needed, never a backup dataset's newest snapshot, never a snapshot above the base of a
    dataset that failed this time, never another job's, never a snapshot rebal did not make."""
    job, report = rep.job.name, rep.report
    sent_ok = {d.source: d for d in report.datasets if d.kind in ("full", "incremental", "nothing")}
    bases = {d.source: d.base for d in report.datasets}
    protect_src: set[str] = set()
    protect_tgt: set[str] = set()
    for dr in report.datasets:
        if dr.source in sent_ok:
            protect_tgt.add(report.snapshot)  # the new common snapshot: the next base
            if dr.cursor != "bookmark" or rep.job.keep_base:  # (keep_base: a failback's common snapshot)
                protect_src.add(report.snapshot)
        elif dr.base:
            protect_tgt.add(dr.base)  # this dataset still depends on its old base
            if not dr.base_bookmark:
                protect_src.add(dr.base)
        if dr.kind == Outcome.FAILED and dr.bytes:
            # cut mid-stream: the receiver may keep a resume token, which names this snapshot; the
            # next run can resume only while the source still has it
            protect_src.add(report.snapshot)
    # source: each snapshot released and destroyed where it is to go (`zfs release -r` fails when a
    # child lacks the snapshot: a child added after it was taken)
    root = rep.job.source
    tree = rep.source_tree  # fetched after the new snapshot, kept up to date through the run
    snaps = {d: [s for s in v if not s.bookmark] for d, v in tree.items()}
    drops = drops_per_dataset(snaps, job, rep.job.retention_source, protect=protect_src, bases=bases,
                              settled=set(sent_ok), newest=False)
    # (a dataset whose backup this run did not list, or that has none, keeps its snapshots this time)
    drops = _guarded(rep, "source", drops, tree, {ds: rep.target_tree[rep.target_of(ds)] for ds in drops
                                                  if rep.target_of(ds) in rep.target_tree})
    drops = confirmed(rep, drops, {ds: {s.name: s.guid for s in snaps.get(ds, [])} for ds in drops})
    having: dict[str, list[str]] = {}
    for d in sorted(drops):
        for n in drops[d]:
            having.setdefault(n, []).append(d)
    failed = _prune_source(rep, snaps, having)
    for name in sorted(having, key=snapshot_time):
        if name in failed:
            report.notes.append(f"could not prune {root}@{name}: {failed[name]}")
        else:
            report.pruned_source.append(name)
    _prune_bookmarks(rep, tree, sent_ok)
    if rep.gate is not None and not rep.job.pull:
        return  # a gated backup host prunes its own snapshots (rebal prune there): the gate refuses destroy
    # target: per dataset this job replicates (a backup whose source is gone is left alone)
    ttree = rep.target_tree  # as the run left it: asked once at the start, updated per dataset sent
    of = {rep.target_of(ds): ds for ds in datasets}
    tdrops = drops_per_dataset({t: ttree.get(t, []) for t in of}, job, rep.job.retention_target, protect=protect_tgt,
                               bases={t: bases.get(ds) for t, ds in of.items()},
                               settled={rep.target_of(d) for d in sent_ok}, newest=True)
    tdrops = _guarded(rep, "backup", tdrops, ttree, {t: tree.get(of[t], []) for t in tdrops})
    done: set[str] = set()
    kept_t: set[str] = set()  # could not be destroyed somewhere
    for t, gone in sorted(tdrops.items()):
        try:
            left = rep.target.destroy_each(t, gone)
        except (CommandFailed, RebalError) as e:  # a bad name, or the backup host gone mid-way
            left = {name: str(e) for name in gone}
        if any(rep.gated_since(why) for why in left.values()):  # gated after its usage text was kept
            report.notes.append(f"the backup host's key is gated now (rebal gate): retention of its snapshots is "
                                f"done there (rebal prune {rep.job.target} --job {job}); the next run knows it")
            kept_t.update(left)
            done.update(gone)
            break
        for name, why in left.items():
            report.notes.append(f"could not prune {t}@{name} on the backup host: {why}")
            kept_t.add(name)
        done.update(gone)
        # the tree as the run leaves it (a record of it may stand for the next run's listing): what
        # went, and what was not there to destroy (gone behind a record, backup_record.py)
        absent = {n for n, why in left.items() if "could not find" in why or "does not exist" in why}
        ttree[t] = [s for s in ttree.get(t, []) if s.name not in (set(gone) - set(left)) | absent]
    report.pruned_target.extend(sorted(done - kept_t))


def _guarded(rep: Replicating, side: str, drops: dict[str, list[str]], here: dict[str, list[Snap]],
             there: dict[str, list[Snap]]) -> dict[str, list[str]]:
    """``drops`` as the guard (guard.py) allows them, each dataset's snapshots seen on both sides (one
    whose other side is not in ``there`` keeps them all); what it refuses stays, said once per dataset."""
    out: dict[str, list[str]] = {}
    for ds, names in drops.items():
        if ds not in there:  # the other side of it was not seen: nothing goes
            continue
        v = guard.allowed(ds, side, here.get(ds, []), names, other=there[ds])
        if v.allowed:
            out[ds] = v.allowed
        if v.refused:
            name, why = next(iter(v.refused.items()))
            more = f" and {len(v.refused) - 1} more" if len(v.refused) > 1 else ""
            rep.report.notes.append(f"kept {ds}@{name}{more} on the {side} side, which retention would prune: {why}")
    return out


def _prune_source(rep: Replicating, snaps: dict[str, list[Snap]], having: dict[str, list[str]]) -> dict[str, str]:
    """Release this job's holds on the snapshots of ``having`` (name: the datasets it goes from) and
    destroy them there
    (`zfs release -r` fails when a child lacks the snapshot: a child added after it was taken), in
    as few commands as the ZFS allows: one release for them all, then one destroy -r of the tree for
    the snapshots every dataset has and one destroy per dataset for the rest (each a comma list,
    rebal/zfs/destroy.py). Returns the snapshots that could not be destroyed, with why."""
    if not having:
        return {}
    try:  # with a bookmark cursor nothing is held: zfs then says "no such tag", which is not an error
        rep.source.release(f"rebal-{rep.job.name}", [f"{d}@{n}" for n in having for d in having[n]])
    except (CommandFailed, RebalError) as e:  # a held snapshot is then not destroyed, and is said
        rep.report.notes.append(f"could not release this job's holds before pruning: {e}")
    return destroy_where_they_are(rep.source, rep.job.source, rep.job.recursive, having, len(snaps))


def _prune_bookmarks(rep: Replicating, tree: dict[str, list[Snap]], sent_ok: dict) -> None:
    """Per dataset sent this time with a bookmark cursor: this job's older bookmarks go (the new one
    is the base now). A dataset that failed keeps its bookmarks: its base is among them."""
    job = rep.job.name
    for ds, d in sent_ok.items():
        if d.cursor != "bookmark":
            continue
        for s in tree.get(ds, []):
            if s.bookmark and is_ours(s.name, job) and s.name != rep.report.snapshot:
                try:
                    rep.source.destroy_bookmark(ds, s.name)
                    rep.report.pruned_bookmarks.append(f"{ds}#{s.name}")
                except (CommandFailed, RebalError) as e:
                    rep.report.notes.append(f"could not destroy the old bookmark {ds}#{s.name}: {e}")
