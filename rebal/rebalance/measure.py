"""Measured placement for the planner: for each directory to rewrite, where its data really is, read
from the block pointers (rebal.where) of a sample of its files (the largest, which hold most of its
bytes), scaled to the directory's size. Bounded by a time limit: directories not reached keep the
model's guess. Where zdb is missing, or not allowed, the plan says so and uses the model."""

from __future__ import annotations

import os
import time
from collections import Counter

from ..errors import RebalError
from ..process.command import run
from .planner import DirEntry
from .scan import Filters, candidates

PER_DIR = 16  # files measured per directory


def measure_dirs(dirs: list[DirEntry], targets, pool, zpool, filters: Filters, *, time_limit: float = 30.0,
                 runner=run) -> tuple[list[DirEntry], str]:
    """``dirs`` with ``placement`` set where measured; and a note saying what was measured."""
    from dataclasses import replace

    from ..where import BATCH, read_objects, vdev_names

    t0 = time.monotonic()
    if os.geteuid() != 0:
        return dirs, "placement not measured (zdb needs root): the plan uses the model"
    try:
        zpool.settle(pool.name)
        names, data_ids = vdev_names(pool, runner)
    except RebalError as e:
        return dirs, f"placement not measured ({e}): the plan uses the model"
    order = {n: i for i, n in enumerate(v.name for v in pool.data_vdevs)}
    roots = sorted(((t.root, t.dataset, os.lstat(t.root).st_dev) for t in targets), key=lambda r: -len(r[0]))
    picks: dict[str, list[tuple[bytes, int]]] = {}  # dataset -> (dir, ino)
    for d in dirs:
        root, ds, dev = next(r for r in roots if d.path == r[0] or d.path.startswith(r[0].rstrip(b"/") + b"/"))
        files = sorted(candidates(d.path, root, dev, filters), key=lambda f: -f[1].st_blocks)[:PER_DIR]
        picks.setdefault(ds, []).extend((d.path, st.st_ino) for _n, st in files)
    got: dict[bytes, Counter] = {}
    measured_dirs: set[bytes] = set()
    stopped = False
    for ds, items in sorted(picks.items()):
        for i in range(0, len(items), BATCH):
            if time.monotonic() - t0 > time_limit:
                stopped = True
                break
            batch = items[i:i + BATCH]
            try:
                found, _gone = read_objects(ds, [ino for _d, ino in batch], runner)
            except RebalError as e:
                return dirs, f"placement not measured ({e}): the plan uses the model"
            for dpath, ino in batch:
                c = got.setdefault(dpath, Counter())
                for vid, n in found.get(ino, Counter()).items():
                    if vid in data_ids:
                        c[names[vid]] += n
                measured_dirs.add(dpath)
        if stopped:
            break
    out = []
    for d in dirs:
        c = got.get(d.path)
        if d.path in measured_dirs and c and sum(c.values()):
            tot = sum(c.values())
            place = [0] * len(order)
            for name, n in c.items():
                if name in order:
                    place[order[name]] = round(d.moves * n / tot)
            out.append(replace(d, placement=tuple(place)))
        else:
            out.append(d)
    n = sum(1 for d in out if d.placement is not None)
    note = (f"placement measured from block pointers: {n} of {len(dirs)} directories "
            f"(up to {PER_DIR} largest files each) in {time.monotonic() - t0:.1f} s")
    if stopped:
        note += f"; the time limit ({time_limit:g} s) left the rest to the model"
    return out, note


def rewritten_placement(plan, done: list[bytes], zpool, zfs, *, sample: int = 500, time_limit: float = 30.0,
                        runner=run) -> dict | None:
    """Where the data of the directories a run rewrote was (the plan's measurement) and is now (read
    again from the block pointers, a sample): {"before": {vdev: share}, "after": {...}, ...}."""
    from ..where import where

    if not plan.measured or not done:
        return None
    names = [v.name for v in plan.before]
    done_set = set(done)
    tot = [0] * len(names)
    for d in plan.ranked:
        if d.path in done_set and d.placement:
            tot = [a + b for a, b in zip(tot, d.placement)]
    if not sum(tot):
        return None
    try:
        rep = where([os.fsdecode(p) for p in done], zpool, zfs, sample=sample, time_limit=time_limit, runner=runner)
    except RebalError as e:
        return {"before": dict(zip(names, (round(b / sum(tot), 4) for b in tot))), "after": None, "error": str(e)}
    return {"before": dict(zip(names, (round(b / sum(tot), 4) for b in tot))),
            "after": {v["name"]: v["share"] for v in rep.vdevs}, "sampled_files": rep.sampled_files,
            "files": rep.files}
