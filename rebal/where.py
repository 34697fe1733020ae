"""`rebal where`: the share of a file's or a tree's allocated bytes on each data vdev, measured from
the block pointers (zfs/placement.py), not guessed. A big tree is sampled, stratified by size: every
file big enough to sway the result (at least 1/sample of the tree's bytes) is measured whole, the
rest by a simple random sample (seeded); the result carries a 95% interval per vdev. zdb runs once
per batch of objects, and a time limit bounds the whole measurement."""

from __future__ import annotations

import math
import os
import random
import re
import stat
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import RebalError, UsageError
from .walk import regular_files
from .zfs import blocks, placement

if TYPE_CHECKING:
    from .zfs.host import ZfsHost
    from .zfs.model import Pool

BATCH = 1000  # objects per zdb process (each costs about a second of start-up on zfs-fuse, whatever its size)


@dataclass
class FileObj:
    dataset: str
    ino: int
    alloc: int  # st_blocks * 512
    path: bytes
    nlink: int = 1  # names of the inode (the first found is the one measured: each inode counts once)


@dataclass
class WhereReport:
    pool: str
    paths: list[str]
    files: int = 0
    sampled_files: int = 0
    measured_bytes: int = 0
    vdevs: list[dict] = field(default_factory=list)  # name, bytes, share, ci95 (share +- this)
    other_bytes: int = 0  # on log, special or dedup vdevs
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    per_file: dict[bytes, Counter] = field(default_factory=dict)  # path -> vdev name -> bytes (kept for callers)

    def as_dict(self) -> dict:
        return {"pool": self.pool, "paths": self.paths, "files": self.files, "sampled_files": self.sampled_files,
                "measured_bytes": self.measured_bytes, "vdevs": self.vdevs, "other_bytes": self.other_bytes,
                "seconds": round(self.seconds, 2), "notes": self.notes}


def collect(paths: list[str], host: ZfsHost) -> tuple[str, list[FileObj]]:
    """The regular files under ``paths`` (not crossing into other file systems) with their dataset."""
    objs: list[FileObj] = []
    pools: set[str] = set()
    seen: set[tuple[str, int]] = set()  # (dataset, inode): a hardlinked file is measured once

    def add(ds: str, st: os.stat_result, path: bytes) -> None:
        if (ds, st.st_ino) not in seen:
            seen.add((ds, st.st_ino))
            objs.append(FileObj(ds, st.st_ino, st.st_blocks * 512, path, st.st_nlink))

    for spec in paths:
        real = os.path.realpath(spec)
        try:
            st = os.lstat(real)
        except OSError as e:
            raise UsageError(f"{spec}: {e.strerror}") from None
        ds, _mp = host.dataset_for_path(real)
        pools.add(ds.split("/")[0])
        if stat.S_ISREG(st.st_mode):
            add(ds, st, os.fsencode(real))
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{spec}: not a file or a directory")
        for p, fst in regular_files(os.fsencode(real), one_fs=True):
            add(ds, fst, p)
    if len(pools) > 1:
        raise UsageError(f"the paths lie on several pools ({', '.join(sorted(pools))}); ask one pool at a time")
    return pools.pop(), objs


_MISSING = re.compile(r"dmu_(?:bonus_hold|object_info)\w*\((\d+)\) failed")


def read_objects(ds: str, inos: list[int], host: ZfsHost, full: bool = False,
                 parse: Callable[[str], dict] | None = None) -> tuple[dict, list[int]]:
    """Block placement of these objects of ``ds`` (one zdb for the lot). An object that went away (a
    file deleted since it was listed) makes zdb stop: it is dropped and the rest read again.
    ``full``: every block pointer in full instead (zfs/blocks.py: compression, checksum, copies, birth);
    ``parse``: the full form read by this parser instead."""
    gone: list[int] = []
    todo = list(inos)
    argv, parse = ((["-ddddd", "-bbbbbb"], parse) if parse is not None else (["-ddddd", "-bbbbbb"], blocks.parse_objects)
                   if full else (["-ddddd"], placement.parse_objects))
    for _ in range(20):
        if not todo:
            return {}, gone
        try:
            return parse(host.zdb([*argv, host.zdb_name(ds), *map(str, todo)])), gone
        except RebalError as e:
            m = _MISSING.search(str(e))
            if not m or int(m.group(1)) not in todo:
                raise
            todo.remove(int(m.group(1)))
            gone.append(int(m.group(1)))
    raise RebalError(f"zdb: too many objects of {ds} went away while being read")


def vdev_names(pool: Pool, host: ZfsHost) -> tuple[dict[int, str], set[int]]:
    """vdev id -> `rebal status` name, and the ids of the data vdevs, of ``pool`` (a zfs.model.Pool)."""
    tops = placement.parse_config(host.zdb(["-C", pool.name]))
    guids = [v.guid for v in pool.data_vdevs]
    return (placement.name_map(tops, [v.name for v in pool.data_vdevs], guids),
            set(placement.data_vdev_ids(tops, {g for g in guids if g} or None)))


def where(paths: list[str], host: ZfsHost, *, sample: int = 2000, seed: int = 0, time_limit: float = 60.0,
          settle: bool = True, keep_files: bool = False, ids: tuple | None = None) -> WhereReport:
    """``ids``: vdev_names as read earlier in this run (read again where it lacks a data vdev now)."""
    t0 = time.monotonic()
    pool, objs = collect(paths, host)
    rep = WhereReport(pool, [os.path.realpath(p) for p in paths], files=len(objs))
    if settle:
        host.settle(pool)  # recent writes show to zdb once their transaction group is on disk
    [p] = host.pools([pool])
    if ids is None or not {v.name for v in p.data_vdevs} <= set(ids[0].values()):
        ids = vdev_names(p, host)
    names, data_ids = ids
    whole, rest, chosen = stratify(objs, sample, seed)
    if len(chosen) < len(objs):
        rep.notes.append((f"the {len(whole)} largest file(s) measured whole and " if whole else "")
                         + f"a random sample of {len(chosen) - len(whole)} of {len(rest)} "
                         + ("other " if whole else "") + f"files (seed {seed})")
    by_ds: dict[str, list[FileObj]] = {}
    for o in chosen:
        by_ds.setdefault(o.dataset, []).append(o)
    measured: list[tuple[FileObj, Counter]] = []
    for ds, group in sorted(by_ds.items()):
        for i in range(0, len(group), BATCH):
            if time.monotonic() - t0 > time_limit:
                rep.notes.append(f"the time limit ({time_limit:g} s) ended the measurement after {len(measured)} files")
                break
            batch = group[i:i + BATCH]
            found, gone = read_objects(ds, [o.ino for o in batch], host)
            for o in batch:
                if o.ino not in gone:
                    measured.append((o, found.get(o.ino, Counter())))
        else:
            continue
        break
    rep.sampled_files = len(measured)
    totals: Counter = Counter()
    for o, c in measured:
        for vid, n in c.items():
            if vid in data_ids:
                totals[names[vid]] += n
            else:
                rep.other_bytes += n
        if keep_files:
            rep.per_file[o.path] = Counter({names.get(v, f"vdev-{v}"): n for v, n in c.items()})
    rep.measured_bytes = sum(totals.values())
    id_of = {v.name: _id(names, v.name) for v in p.data_vdevs}
    if len(measured) == len(objs):
        for v in p.data_vdevs:
            b = totals.get(v.name, 0)
            rep.vdevs.append({"name": v.name, "bytes": b,
                              "share": round(b / rep.measured_bytes, 4) if rep.measured_bytes else 0.0})
    else:
        # cut short by the time limit before any sampling: what was measured stands for all the files
        in_whole = {id(o) for o in whole} if rest else set()
        est = estimate([(id(o) in in_whole, {v: c.get(i, 0) for v, i in id_of.items()}) for o, c in measured],
                       len(rest) if rest else len(objs))
        for v in p.data_vdevs:
            share, half = est.get(v.name, (0.0, 1.0))
            rep.vdevs.append({"name": v.name, "bytes": totals.get(v.name, 0), "share": round(share, 4),
                              "ci95": round(half, 4)})
    rep.seconds = time.monotonic() - t0
    return rep


def stratify(objs: list[FileObj], sample: int, seed: int) -> tuple[list[FileObj], list[FileObj], list[FileObj]]:
    """(measured whole, the rest, all chosen). Every object at least 1/sample of the bytes (up to half
    the budget, largest first) is measured whole: a few big files among many small ones would
    otherwise make a random sample's share swing by whether it caught one of them."""
    if len(objs) <= sample:
        return list(objs), [], list(objs)
    total = sum(o.alloc for o in objs)
    by_size = sorted(objs, key=lambda o: -o.alloc)
    cut = 0
    while cut < sample // 2 and by_size[cut].alloc > 0 and by_size[cut].alloc * sample >= total:
        cut += 1
    whole, rest = by_size[:cut], by_size[cut:]
    rest.sort(key=lambda o: (o.dataset, o.ino))  # the seeded sample must not depend on walk order
    picked = random.Random(seed).sample(rest, sample - cut)
    return whole, rest, whole + picked


def estimate(rows: list[tuple[bool, dict[str, int]]], rest_population: int) -> dict[str, tuple[float, float]]:
    """vdev -> (share, 95% half-width) from measured rows (in the whole stratum?, vdev -> bytes).
    Stratified ratio estimate: whole-stratum bytes count once, sampled ones N/n times; the interval
    is the linearised variance of the sampled stratum (1.96 * sqrt((1 - n/N) N^2 s_e^2 / n) / X),
    e = y - share * x; it is 0 when the rest was measured whole or holds no bytes."""
    sampled = [c for w, c in rows if not w]
    n = len(sampled)
    scale = rest_population / n if n else 0.0
    vdevs = list(rows[0][1]) if rows else []
    ys = {v: sum(c[v] for w, c in rows if w) + scale * sum(c[v] for c in sampled) for v in vdevs}
    xhat = sum(ys.values())
    out: dict[str, tuple[float, float]] = {}
    for v in vdevs:
        share = ys[v] / xhat if xhat else 0.0
        if n < 2 or not xhat:
            out[v] = (share, 0.0 if n == rest_population else 1.0)
            continue
        e = [c[v] - share * sum(c.values()) for c in sampled]
        ebar = sum(e) / n
        s2 = sum((x - ebar) ** 2 for x in e) / (n - 1)
        var = max(0.0, 1 - n / rest_population) * rest_population ** 2 * s2 / n
        out[v] = (share, min(1.0, 1.96 * math.sqrt(var) / xhat))
    return out


def _id(names: dict[int, str], name: str) -> int:
    return next((i for i, n in names.items() if n == name), -1)
