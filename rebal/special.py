"""`rebal plan --to special` and `rebal rebalance --to special`: a special vdev added to a pool takes
only what is written after it came; the metadata and small blocks written before stay on the normal
vdevs. Which files hold them is measured from the block pointers (`zdb -ddddd -bbbbbb`, as `rebal
where` and `rebal refresh` read them; zfs/special.py says what a write now puts in the special
class), and the run rewrites those files through the rebalance's machinery (refresh.run_passes:
journal, limits, snapshot budget, resume), in place with `zfs rewrite` where the pool has it.

Files are chosen one by one, not by directory: a directory mixes small files (all of them bound for
the special class) with big ones (a fraction of a percent of indirect blocks); rewriting the big
ones would cost hundreds of bytes for each byte moved. Every file whose bound bytes are at least
MIN_SHARE of what it holds is taken (at most 1/MIN_SHARE bytes rewritten per byte moved); `--all` takes every file that
holds any.
The plan says what share of the bound bytes the chosen files hold."""

from __future__ import annotations

import sqlite3

import os
import shutil
import threading
import time
from functools import partial
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import RebalError, ToolMissing
from .outcome import Outcome
from .where import FileObj, collect, read_objects, stratify
from .zfs.placement import data_vdev_ids, parse_config
from .zfs.special import RESERVE_PCT, Bound, parse_bound, room, small_limit
from .zfs.tunable import Parameter

if TYPE_CHECKING:
    from .config import Config
    from .rebalance.runstate import Events
    from .zfs.model import Pool
    from .zfs.host import ZfsHost

MIN_SHARE = 0.02  # a file is worth rewriting for the special class when this share of it moves
TOP_DIRS = 10


class NoSpecialError(RebalError):
    exit_code = 2


@dataclass
class Measured:
    pool: str
    paths: list[str]
    files: int
    rows: list[tuple[FileObj, Bound, bool]]  # (file, what the special class would take, measured whole)
    rest_population: int
    small: dict[str, int]  # dataset -> special_small_blocks in bytes
    special: dict  # names, size, alloc of the special class
    reserve_pct: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    def weight(self, whole: bool) -> float:
        """How many files of the tree a measured one stands for."""
        sampled = sum(1 for _o, _b, w in self.rows if not w)
        return 1.0 if whole or not sampled else self.rest_population / sampled


def special_class(pool: Pool) -> dict:
    vs = [v for v in pool.vdevs if v.vclass == "special"]
    if not vs:
        raise NoSpecialError(f"pool {pool.name} has no special vdev: nothing would move "
                             f"(zpool add {pool.name} special mirror DISK DISK adds one)")
    return {"vdevs": [v.name for v in vs], "size": sum(v.size for v in vs), "alloc": sum(v.alloc for v in vs)}


def measure(paths: list[str], host: ZfsHost, *, sample: int | None = None, seed: int = 0,
            progress: Callable[[int, int], None] | None = None) -> Measured:
    """Read the block pointers of the files under ``paths`` (a stratified sample of ``sample`` files
    where given and the tree is bigger)."""
    from .rebalance.prepare import resolve_targets

    t0 = time.monotonic()
    paths = [os.fsdecode(t.root) for t in resolve_targets(host, paths)]  # a dataset's name: its mountpoint
    pool_name, objs = collect(paths, host)
    if shutil.which("zdb") is None:
        raise ToolMissing("zdb is not installed: it ships with zfsutils-linux (OpenZFS)")
    host.settle(pool_name)  # the newest writes show in the block pointers once on disk
    [pool] = host.pools([pool_name])
    special = special_class(pool)
    # the normal vdevs by guid: zdb -C does not say which vdev is special (the vdev's ZAP does)
    guids = {v.guid for v in pool.data_vdevs if v.guid}
    if not guids:
        raise NoSpecialError(f"this zpool does not say its vdevs' guids (zpool list -j: OpenZFS 2.3+): which of "
                             f"pool {pool_name}'s vdevs is special cannot be told from the block pointers")
    normal = set(data_vdev_ids(parse_config(host.zdb(["-C", pool_name])), guids))
    notes: list[str] = []
    if sample is None or len(objs) <= sample:
        chosen, whole_ids = list(objs), {id(o) for o in objs}
        rest: list[FileObj] = []
    else:
        whole, rest, chosen = stratify(objs, sample, seed)
        whole_ids = {id(o) for o in whole}
        notes.append(f"the {len(whole)} largest file(s) measured whole and a random sample of "
                     f"{len(chosen) - len(whole)} of {len(rest)} other files (seed {seed})")
    small = {}
    for ds in sorted({o.dataset for o in chosen}):
        got = host.properties(ds, ["special_small_blocks"], check=False)
        small[ds] = small_limit(got.get("special_small_blocks", "0"))
    rows: list[tuple[FileObj, Bound, bool]] = []
    by_ds: dict[str, list[FileObj]] = {}
    for o in chosen:
        by_ds.setdefault(o.dataset, []).append(o)
    from .oldblocks import batches

    done = 0
    for ds, group in sorted(by_ds.items()):
        for batch in batches(group):
            found, gone = read_objects(ds, [o.ino for o in batch], host,
                                       parse=partial(parse_bound, normal=normal, small=small[ds]))
            rows += [(o, found.get(o.ino) or Bound(), id(o) in whole_ids) for o in batch if o.ino not in gone]
            done += len(batch)
            if progress:
                progress(done, len(chosen))
    reserve = Parameter("zfs_special_class_metadata_reserve_pct").read()
    return Measured(pool_name, [os.path.realpath(p) for p in paths], len(objs), rows, len(rest), small, special,
                    RESERVE_PCT if reserve is None else reserve, time.monotonic() - t0, notes)


def choose(m: Measured, everything: bool = False) -> tuple[list[tuple[FileObj, Bound, bool]], float]:
    """The measured files to rewrite (most bound share first) and the bound bytes of the whole tree."""
    bound = [(o, b, w) for o, b, w in m.rows if b.total]
    total = sum(m.weight(w) * b.total for _o, b, w in bound)
    if everything:
        return sorted(bound, key=lambda r: -r[1].total / max(r[1].alloc, 1)), total
    worth = [r for r in bound if r[1].total >= MIN_SHARE * max(r[1].alloc, 1)]
    return sorted(worth, key=lambda r: -r[1].total / max(r[1].alloc, 1)), total


def summary(m: Measured, everything: bool = False) -> dict:
    chosen, total = choose(m, everything)
    w = m.weight

    def tally(rows: list[tuple[FileObj, Bound, bool]], key: Callable[[Bound], int]) -> int:
        return int(sum(w(x) * key(b) for _o, b, x in rows))

    meta, small = tally(chosen, lambda b: b.meta), tally(chosen, lambda b: b.small)
    room_meta, room_small = room(m.special["size"], m.special["alloc"], m.reserve_pct)
    moves_small = min(small, room_small)
    moves_meta = min(meta, max(0, room_meta - moves_small))
    warnings = []
    if moves_small < small:
        warnings.append(f"the special class takes small blocks only up to {100 - m.reserve_pct}% of its space "
                        f"(zfs_special_class_metadata_reserve_pct={m.reserve_pct}): {small - moves_small} bytes of "
                        "them would stay on the normal vdevs")
    if moves_meta < meta:
        warnings.append(f"the special class is too small for the metadata: {meta - moves_meta} bytes would stay")
    dirs: dict[str, float] = {}
    for o, b, x in m.rows:
        if b.total:
            d = os.fsdecode(os.path.dirname(o.path))
            dirs[d] = dirs.get(d, 0.0) + w(x) * b.total
    datasets = [{"dataset": ds, "special_small_blocks": s,
                 "metadata_bytes": tally([r for r in m.rows if r[0].dataset == ds], lambda b: b.meta),
                 "small_bytes": tally([r for r in m.rows if r[0].dataset == ds], lambda b: b.small),
                 "on_special_bytes": tally([r for r in m.rows if r[0].dataset == ds], lambda b: b.on_special)}
                for ds, s in sorted(m.small.items())]
    return {"pool": m.pool, "paths": m.paths, "to": "special", "files": m.files, "measured_files": len(m.rows),
            "special": m.special | {"reserve_pct": m.reserve_pct, "room_metadata": room_meta, "room_small": room_small},
            "datasets": datasets, "bound_bytes": int(total),
            "chosen": {"files": int(round(sum(w(x) for _o, _b, x in chosen))), "bytes": tally(chosen, lambda b: b.alloc),
                       "metadata_bytes": meta, "small_bytes": small,
                       "share_of_bound": round((meta + small) / total, 4) if total else 0.0},
            "predicted": {"metadata_moved": moves_meta, "small_moved": moves_small},
            "dirs": [{"path": p, "bytes": int(n)} for p, n in sorted(dirs.items(), key=lambda kv: -kv[1])[:TOP_DIRS]],
            "seconds": round(m.seconds, 2), "notes": m.notes, "warnings": warnings}


def plan(paths: list[str], host: ZfsHost, *, sample: int = 2000, seed: int = 0, everything: bool = False) -> dict:
    return summary(measure(paths, host, sample=sample, seed=seed), everything)


def _todo(chosen: list[tuple[FileObj, Bound, bool]]) -> list[tuple]:
    """(path, st_dev, st_ino) of the chosen files still as measured (one replaced since is left)."""
    out = []
    for o, _b, _w in chosen:
        try:
            st = os.lstat(o.path)
        except OSError:
            continue
        if st.st_ino == o.ino:
            out.append((o.path, st.st_dev, st.st_ino))
    return out


def rebalance(cfg: Config, paths: list[str], host: ZfsHost, conn: sqlite3.Connection, *, given: dict, everything: bool = False,
              events: Events | None = None, stop: threading.Event | None = None, dry_run: bool = False,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Measure every file, rewrite the chosen ones, measure again: what left the normal vdevs."""
    from .refresh import _in_place, run_passes

    before = measure(paths, host, progress=progress)
    out: dict[str, Any] = {"dry_run": dry_run, "before": summary(before, everything)}
    chosen, _total = choose(before, everything)
    in_place = _in_place(host, given.get("method"))
    method = "rewrite" if in_place else "copy"
    left = []
    if method == "copy" and not cfg.rebalance.hardlinks:
        left = [os.fsdecode(o.path) for o, _b, _w in chosen if o.nlink > 1]
        chosen = [r for r in chosen if r[0].nlink <= 1]
    out["left"] = left
    todo = {method: _todo(chosen)}
    if not todo[method]:
        out["outcome"], out["reason"] = Outcome.OK, ("nothing to move: no file holds metadata or small blocks on the "
                                               "normal vdevs worth a rewrite")
        return out
    special_before = before.special["alloc"]
    out["passes"] = run_passes(cfg, paths, host, conn, todo, given, purpose="special",
                               whys={method: "metadata and small blocks to the special class"},
                               events=events, stop=stop, dry_run=dry_run)
    if dry_run:
        out["outcome"], out["reason"] = Outcome.OK, f"would rewrite {len(todo[method])} file(s)"
        return out
    if stop is not None and stop.is_set():
        out["outcome"], out["reason"] = Outcome.INTERRUPTED, "stopped by a signal; the next run continues"
        return out
    after = measure(paths, host)
    out["after"] = summary(after, everything)
    was, now = out["before"]["bound_bytes"], out["after"]["bound_bytes"]
    out["moved"] = {"bound_before": was, "bound_after": now, "left_normal_bytes": was - now,
                    "special_alloc_before": special_before, "special_alloc_after": after.special["alloc"]}
    outcomes = [p.get("outcome") for p in out["passes"]]
    out["outcome"] = Outcome.OK if all(o == Outcome.OK for o in outcomes) else next(o for o in outcomes if o != Outcome.OK)
    out["reason"] = next((p.get("reason") for p in out["passes"] if p.get("outcome") != Outcome.OK), None) or (
        f"{sum(p.get('rewritten_files', 0) for p in out['passes'])} file(s) rewritten; {was - now} bytes of metadata "
        f"and small blocks left the normal vdevs, {now} still there")
    return out
