"""Retention over a tree whose datasets have their own histories (issue 64): in a run only the
datasets with something written get a snapshot, so the newest snapshot of each may have another
name. Property-based (hypothesis): over random trees and random per-dataset histories, no backup
dataset loses its newest snapshot, no dataset whose replication failed loses a snapshot from its
base up, and nothing but this job's snapshots is ever dropped."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from rebal.replicate.policy import Buckets, snapshot_name
from rebal.replicate.retention import drops_per_dataset
from rebal.zfs.snaps import Snap

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


@st.composite
def histories(draw):
    n_ds = draw(st.integers(1, 6))
    datasets = [f"bk/w"] + [f"bk/w/c{i}" for i in range(n_ds - 1)]
    runs = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.integers(1, 60 * 24 * 3), min_size=runs, max_size=runs))  # minutes between runs
    tree: dict[str, list[Snap]] = {d: [] for d in datasets}
    when, txg = T0, 100
    for r in range(runs):
        when += timedelta(minutes=gaps[r])
        changed = draw(st.lists(st.sampled_from(datasets), unique=True, min_size=1 if r == 0 else 0))
        name = snapshot_name("w", when)
        for d in (datasets if r == 0 else changed):  # the first run sends every dataset in full
            txg += 1
            tree[d].append(Snap(name, guid=txg, txg=txg))
        if draw(st.booleans()):  # an admin's own snapshot, or another job's: never rebal's to drop
            txg += 1
            tree[datasets[0]].append(Snap(draw(st.sampled_from(["manual", snapshot_name("other", when)])), txg, txg))
    failed = draw(st.lists(st.sampled_from(datasets), unique=True))
    bases = {}
    for d in failed:
        ours = [s.name for s in tree[d] if s.name.startswith("rebal-w-")]
        bases[d] = draw(st.sampled_from([None, *ours])) if ours else None
    buckets = Buckets(hourly=draw(st.integers(0, 3)), daily=draw(st.integers(0, 3)), weekly=draw(st.integers(0, 2)),
                      monthly=draw(st.integers(0, 2)), last=draw(st.integers(0, 2)))
    protect = set(draw(st.lists(st.sampled_from([s.name for v in tree.values() for s in v]), max_size=2)))
    return tree, buckets, set(datasets) - set(failed), bases, protect


@settings(max_examples=400, deadline=None)
@given(histories())
def test_no_dataset_loses_its_newest_nor_anything_above_a_failed_base(h):
    tree, buckets, settled, bases, protect = h
    for newest in (True, False):  # the backup's side, the source's
        drops = drops_per_dataset(tree, "w", buckets, protect=protect, bases=bases, settled=settled, newest=newest)
        for ds, gone in drops.items():
            ours = [s for s in tree[ds] if s.name.startswith("rebal-w-")]
            assert set(gone) <= {s.name for s in ours}, "only this job's snapshots"
            assert not set(gone) & protect
            if newest:
                assert max(ours, key=lambda s: s.txg).name not in gone, "a backup dataset's newest snapshot"
                # (the histories' txgs grow with their times, as they do in a pool)
            if ds not in settled:
                base = bases.get(ds)
                names = [s.name for s in sorted(ours, key=lambda s: s.txg)]
                above = names[names.index(base):] if base in names else names
                assert not set(gone) & set(above), (ds, base, gone)


def test_the_issue_64_tree_keeps_the_only_snapshot_of_c():
    """Step 4 of the issue: c's newest (065207Z) holds c/new1; the tree's newest name all share is
    065142Z. Pruned by name with last=1 and c failing as diverged, 065207Z was destroyed."""
    a, b = "rebal-w-20261205T065142Z", "rebal-w-20261205T065207Z"
    c_new = "rebal-w-20261206T070000Z"
    tree = {"bk/w": [Snap(a, 1, 1)], "bk/w/c": [Snap(a, 2, 2), Snap(b, 3, 3)], "bk/w/c/g": [Snap(a, 4, 4), Snap(c_new, 5, 5)],
            "bk/w/e": [Snap(a, 6, 6)]}
    drops = drops_per_dataset(tree, "w", Buckets(0, 0, 0, 0, last=1), protect={c_new}, bases={"bk/w/c": None},
                              settled={"bk/w", "bk/w/c/g", "bk/w/e"}, newest=True)
    assert "bk/w/c" not in drops and drops == {"bk/w/c/g": [a]}
