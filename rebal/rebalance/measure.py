"""Measured placement for the planner: for each directory to rewrite, where its data really is, read
from the block pointers (rebal.where) of a sample of its files (the largest, which hold most of its
bytes), scaled to the directory's size. Bounded by a time limit: directories not reached keep the
model's guess. Where zdb is missing, or not allowed, the plan says so and uses the model."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import RebalError
from .planner import DirEntry
from .scan import Filters, candidates

if TYPE_CHECKING:
    from ..zfs.host import ZfsHost
    from ..zfs.model import Pool
    from .options import Target
    from .planner import Plan

PER_DIR = 16  # files measured per directory


def measure_dirs(dirs: list[DirEntry], targets: list[Target], pool: Pool, host: ZfsHost, filters: Filters, *,
                 time_limit: float = 30.0) -> tuple[list[DirEntry], str, tuple | None]:
    """``dirs`` with ``placement`` set where measured; a note saying what was measured; and the pool's
    vdev ids (where.vdev_names: read once a run, the run's last measurement uses them again)."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    from ..where import BATCH, read_objects, vdev_names

    t0 = time.monotonic()
    if os.geteuid() != 0:
        return dirs, "placement not measured (zdb needs root): the plan uses the model", None
    # zdb -C and the objects' zdb at once: each pays zdb's start (the pool opened from its disks)
    with ThreadPoolExecutor(1) as ex:
        ids_asked = ex.submit(vdev_names, pool, host)
        try:
            host.settle(pool.name)
            got, stopped = _read_dirs(dirs, targets, filters, t0, time_limit, host, BATCH, read_objects)
            names, data_ids = ids_asked.result()
        except RebalError as e:
            return dirs, f"placement not measured ({e}): the plan uses the model", None
    order = {n: i for i, n in enumerate(v.name for v in pool.data_vdevs)}
    out = []
    for d in dirs:
        by_vdev: Counter[str] = Counter()
        for vid, n in got.get(d.path, Counter()).items():
            if vid in data_ids:
                by_vdev[names[vid]] += n
        if d.path in got and by_vdev.total():
            tot = sum(by_vdev.values())
            place = [0] * len(order)
            for name, n in by_vdev.items():
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
    return out, note, (names, data_ids)


def _read_dirs(dirs: list[DirEntry], targets: list[Target], filters: Filters, t0: float, time_limit: float,
               host: ZfsHost, batch_size: int,
               read_objects: Callable[..., tuple[dict, list[int]]]) -> tuple[dict[bytes, Counter], bool]:
    """Each measured directory's bytes by vdev id (its up to PER_DIR largest files, one zdb per
    dataset and batch), and whether the time limit stopped it."""
    roots = sorted(((t.root, t.dataset, os.lstat(t.root).st_dev) for t in targets), key=lambda r: -len(r[0]))
    picks: dict[str, list[tuple[bytes, int]]] = {}  # dataset -> (dir, ino)
    for d in dirs:
        root, ds, dev = next(r for r in roots if d.path == r[0] or d.path.startswith(r[0].rstrip(b"/") + b"/"))
        files = sorted(candidates(d.path, root, dev, filters), key=lambda f: -f[1].st_blocks)[:PER_DIR]
        picks.setdefault(ds, []).extend((d.path, st.st_ino) for _n, st in files)
    got: dict[bytes, Counter] = {}
    for ds, items in sorted(picks.items()):
        for i in range(0, len(items), batch_size):
            if time.monotonic() - t0 > time_limit:
                return got, True
            batch = items[i:i + batch_size]
            found, _gone = read_objects(ds, [ino for _d, ino in batch], host)
            for dpath, ino in batch:
                got.setdefault(dpath, Counter()).update(found.get(ino, Counter()))
    return got, False


def rewritten_placement(plan: Plan, done: list[bytes], host: ZfsHost, *, sample: int = 500, time_limit: float = 30.0,
                        ids: tuple | None = None) -> dict | None:
    """Where the data of the directories a run rewrote was (the plan's measurement) and is now (read
    again from the block pointers, a sample): {"before": {vdev: share}, "after": {...}, ...}.
    ``ids``: the vdev ids the plan's measurement read (not asked of zdb again)."""
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
        rep = where([os.fsdecode(p) for p in done], host, sample=sample, time_limit=time_limit, ids=ids)
    except RebalError as e:
        return {"before": dict(zip(names, (round(b / sum(tot), 4) for b in tot))), "after": None, "error": str(e)}
    return {"before": dict(zip(names, (round(b / sum(tot), 4) for b in tot))),
            "after": {v["name"]: v["share"] for v in rep.vdevs}, "sampled_files": rep.sampled_files,
            "files": rep.files}
