"""Which bytes were written under properties a dataset no longer has, or at a raidz vdev's data:parity
ratio from before its expansion, measured from block pointers.

After `zfs set compression=zstd` (or checksum, copies, dedup, recordsize) only new writes follow. Each
data block pointer says what it was written with (zfs/blocks.py); this compares every measured block
with what a write now would get, and sums the difference per dataset, per directory and per property.
A big tree is sampled as `rebal where` samples it (the largest files whole, a seeded random sample of
the rest; totals scaled, with a 95% interval).

A block stored uncompressed under a compressing property is either old or data that did not compress
when it was written (ZFS keeps a block uncompressed unless it saves an eighth): it counts as old only
where a quick compression of its data (zlib, level 1) saves an eighth, so incompressible data is never
rewritten again and again. The saving a refresh of compression buys is predicted by compressing a sample
of the old blocks' data, block by block, with the new algorithm (zstd and lz4 by their programs, gzip
by zlib), rounded to the pool's sector size as ZFS allocates it.

A raidz block's allocated size says the width it was written at (vdev_raidz_asize): one stored wider
than the vdev stores a block of its size now is at an old ratio, and a rewrite returns the difference.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import RebalError, ToolMissing
from .process.command import PIPE, spawn
from .where import BATCH, FileObj, collect, read_objects, stratify
from .zfs.blocks import Block, ObjectBlocks, expected_checksum, expected_compression
from .zfs.expansion import deflate_ratio, raidz_asize
from .zfs.placement import parse_config

if TYPE_CHECKING:
    from .zfs.host import ZfsHost

# zfs rewrite applies these (raidz: a block at the ratio of before an expansion); recordsize needs a copy
REWRITE_APPLIES = ("compression", "checksum", "copies", "dedup", "raidz")
PREDICT_BYTES = 32 << 20  # old blocks' data compressed to predict the saving
BATCH_BYTES = 4 << 30  # allocated bytes of files per zdb (32K lines of 128K blocks)


@dataclass(frozen=True)
class Wanted:
    """What a block written now in a dataset gets."""
    compression: str
    checksum: str
    copies: int
    dedup: bool
    recordsize: int
    values: dict = field(default_factory=dict)  # the properties as `zfs get` gives them


ANY = Wanted("", "", 0, False, 0)  # properties not judged (a raidz ratio measurement alone)


def wanted(ds: str, host: ZfsHost) -> Wanted:
    v = host.properties(ds, ["compression", "checksum", "copies", "recordsize", "dedup"])
    has_lz4 = host.pool_features(ds.split("/")[0], ["lz4_compress"]).get("lz4_compress") in ("active", "enabled")
    return Wanted(expected_compression(v.get("compression", "off"), has_lz4),
                  expected_checksum(v.get("checksum", "on"), v.get("dedup", "off")),
                  int(v.get("copies", "1") or 1), v.get("dedup", "off") not in ("off", "-"),
                  int(v.get("recordsize", "131072") or 131072), v)


def compressible(data: bytes, lsize: int | None = None, min_alloc: int = 512) -> bool:
    """Whether ZFS would store this block compressed, judged by a quick compression (zlib, level 1):
    it must save the eighth ZFS asks, and the compressed block rounded up to the pool's smallest
    allocation must be smaller than the block (else ZFS stores it uncompressed: a 2 KiB block at
    ashift 12 takes a 4 KiB sector either way). A tiny block that OpenZFS could embed in its block
    pointer (embedded_data) is left too: it saves at most one sector, and where the pool lacks the
    feature it would be rewritten on every run. ``lsize``: the block's logical size (a file's last
    block is zeros past its end)."""
    lsize = max(lsize or len(data), len(data))
    c = len(zlib.compress(data + bytes(lsize - len(data)), 1))
    if c > lsize - lsize // 8:
        return False
    return -(-c // min_alloc) * min_alloc < lsize


def block_reasons(b: Block, want: Wanted, data: Callable[[], bytes | None] | None = None, min_alloc: int = 512) -> set[str]:
    """The properties this block differs in. ``data()`` gives its bytes, asked only for an uncompressed
    block under a compressing property (None: counted as old); ``min_alloc``: the pool's smallest
    allocation (1 << the smallest ashift), which a compressed block must undercut to be stored so."""
    if want is ANY:
        return set()
    out = set()
    if b.compression != want.compression:
        if b.compression != "uncompressed" or want.compression == "uncompressed" or data is None:
            out.add("compression")
        else:
            got = data()
            if got is not None and compressible(got, b.lsize, min_alloc):
                out.add("compression")
    if b.checksum != want.checksum:
        out.add("checksum")
    if b.copies != want.copies:
        out.add("copies")
    if b.dedup != want.dedup:
        out.add("dedup")
    return out


def record_stale(ob: ObjectBlocks, want: Wanted) -> bool:
    """Whether the file's blocks have another size than a copy written now would get."""
    if want is ANY:
        return False
    n = len(ob.blocks) + ob.embedded
    return (n > 1 and ob.dblk != want.recordsize) or (n == 1 and ob.dblk > want.recordsize)


@dataclass
class FileStale:
    path: bytes
    dataset: str
    alloc: int  # the file's allocated bytes (every block)
    by_reason: Counter  # property -> allocated bytes of the blocks old in it (recordsize: the whole file)
    blocks: list[tuple[Block, bool]]  # (block, old in compression), for the prediction
    stale: int = 0  # bytes in blocks old in any property (a file old in recordsize: all of it)
    reclaim: Counter = field(default_factory=Counter)  # raidz vdev id -> allocated bytes a rewrite returns
    old_ratio: Counter = field(default_factory=Counter)  # raidz vdev id -> allocated bytes at an older ratio

    @property
    def method(self) -> str:
        """zfs rewrite applies every property but the block size: that takes a copy."""
        return "copy" if self.by_reason.get("recordsize") else "rewrite"


def _reader(path: bytes) -> Callable[[Block], Callable[[], bytes | None]]:
    def read(b: Block) -> Callable[[], bytes | None]:
        def data() -> bytes | None:
            try:
                with open(path, "rb") as f:
                    f.seek(b.offset)
                    return f.read(b.lsize)
            except OSError:
                return None
        return data
    return read


def old_ratio(b: Block, raidz: dict) -> tuple[int, Counter, Counter]:
    """(allocated bytes of the block's copies on raidz vdevs stored at an older, wider-parity ratio than
    the vdev stores them now, vdev id -> what a rewrite returns of them). A copy's size says the width
    it was written at: after an expansion a block keeps its old data:parity ratio; a rewrite
    allocates at the new one (vdev_raidz_asize, zfs/expansion.py)."""
    old = 0
    by: Counter = Counter()
    back: Counter = Counter()
    for vdev, asize in b.dvas:
        top = raidz.get(vdev)
        if top is None:
            continue
        now = raidz_asize(b.psize, top.width, top.nparity, top.ashift)
        if asize > now:
            old += asize
            by[vdev] += asize
            back[vdev] += asize - now
    return old, by, back


def judge(o: FileObj, ob: ObjectBlocks, want: Wanted, raidz: dict | None = None, min_alloc: int = 512) -> FileStale:
    by: Counter = Counter()
    rows = []
    anyb = 0
    back: Counter = Counter()
    old_on: Counter = Counter()
    read = _reader(o.path)
    for b in ob.blocks:
        why = block_reasons(b, want, read(b), min_alloc)
        if raidz:
            old, on, got = old_ratio(b, raidz)
            if old:
                why.add("raidz")
                by["raidz"] += old
                old_on.update(on)
                back.update(got)
        for r in why - {"raidz"}:
            by[r] += b.asize
        if why:
            anyb += b.asize
        rows.append((b, "compression" in why))
    alloc = sum(b.asize for b in ob.blocks)
    if record_stale(ob, want) and ob.blocks:
        by["recordsize"] += alloc
        anyb = alloc
    return FileStale(o.path, o.dataset, alloc, by, rows, anyb, back, old_on)


@dataclass
class Measured:
    pool: str
    paths: list[str]
    files: int
    sampled: list[tuple[FileObj, FileStale, bool]]  # (file, its judgement, measured whole: not a sample)
    rest_population: int
    wants: dict[str, Wanted]
    sector: int
    seconds: float
    notes: list[str]
    raidz: dict = field(default_factory=dict)  # top-level vdev id -> placement.TopVdev, the raidz ones


def measure(paths: list[str], host: ZfsHost, *, sample: int | None = 2000, seed: int = 0, progress: Callable[[int, int], None] | None = None,
            properties: bool = True) -> Measured:
    """Read the block pointers of the files under ``paths`` (all of them with ``sample=None``).
    ``properties`` False: only the raidz ratio is judged (no property asked, no data read)."""
    t0 = time.monotonic()
    pool, objs = collect(paths, host)
    if shutil.which("zdb") is None:
        raise ToolMissing("zdb is not installed: it ships with zfsutils-linux (OpenZFS) and zfs-fuse")
    host.settle(pool)  # the newest writes show in the block pointers once their transaction group is on disk
    notes: list[str] = []
    if sample is None or len(objs) <= sample:
        whole, chosen = list(objs), list(objs)
        rest: list[FileObj] = []
    else:
        whole, rest, chosen = stratify(objs, sample, seed)
        notes.append(f"the {len(whole)} largest file(s) measured whole and a random sample of "
                     f"{len(chosen) - len(whole)} of {len(rest)} other files (seed {seed})")
    wants = {ds: wanted(ds, host) if properties else ANY for ds in sorted({o.dataset for o in chosen})}
    tops = parse_config(host.zdb(["-C", pool]))
    raidz = {t.id: t for t in tops if t.type == "raidz" and t.nparity and t.width > t.nparity}
    min_alloc = 1 << min((t.ashift for t in tops if t.ashift), default=9)  # spa_min_alloc
    in_whole = {id(o) for o in whole}
    by_ds: dict[str, list[FileObj]] = {}
    for o in chosen:
        by_ds.setdefault(o.dataset, []).append(o)
    out: list[tuple[FileObj, FileStale, bool]] = []
    done = 0
    for ds, group in sorted(by_ds.items()):
        for batch in batches(group):
            found, gone = read_objects(ds, [o.ino for o in batch], host, full=True)
            for o in batch:
                if o.ino in gone:
                    continue
                ob = found.get(o.ino) or ObjectBlocks(o.ino, 0)
                out.append((o, judge(o, ob, wants[ds], raidz, min_alloc), id(o) in in_whole or not rest))
            done += len(batch)
            if progress:
                progress(done, len(chosen))
    sector = 1 << max((t.ashift for t in tops if t.ashift), default=9)
    return Measured(pool, [os.path.realpath(p) for p in paths], len(objs), out, len(rest), wants,
                    sector, time.monotonic() - t0, notes, raidz)


def reclaim_estimate(m: Measured, made: dict[int, int]) -> dict | None:
    """What rewriting the blocks stored at an old raidz ratio returns, from their sizes, in the units
    of `used` and `available` (allocated bytes deflated by each vdev's ratio from when it was made:
    ``made`` gives its width then, e.g. from `zpool status`'s expansion; an expansion keeps it)."""
    if not m.raidz:
        return None
    files, _ = total(m, lambda f: 1 if f.by_reason.get("raidz") else 0)
    old = back = half = 0.0
    for vid, top in m.raidz.items():
        k = deflate_ratio(made.get(vid, top.width), top.nparity, top.ashift) / 512
        o, h = total(m, lambda f: f.old_ratio.get(vid, 0))  # (called here: vid is this one)
        got, _ = total(m, lambda f: f.reclaim.get(vid, 0))
        old, half, back = old + o * k, half + h * k, back + got * k
    return {"old_ratio_bytes": int(old), "old_ratio_ci95": int(half), "old_ratio_files": int(round(files)),
            "reclaim_bytes": int(back), "files_measured": len(m.sampled)}


def measure_reclaim(roots: list[str], host: ZfsHost, widths_before: dict[str, int], sample: int = 2000) -> dict | None:
    """The plan's RAIDZ-expansion figures measured from the block pointers of (a sample of) the files
    under ``roots``; ``widths_before``: expanded vdev name (raidz1-0) -> its width before, as
    `zpool status` says (the trailing number of the name is the vdev's id)."""
    m = measure(roots, host, sample=sample, properties=False)
    made = {int(name.rsplit("-", 1)[1]): w for name, w in widths_before.items() if name.rsplit("-", 1)[-1].isdigit()}
    out = reclaim_estimate(m, made)
    if out is not None:
        out["notes"] = m.notes
    return out


def batches(group: list[FileObj], most: int = BATCH_BYTES) -> list[list[FileObj]]:
    """Runs of at most BATCH objects and about ``most`` allocated bytes: zdb prints a line of some 250
    characters per block, read whole, so a batch of big files is kept to some tens of MB of text."""
    out: list[list[FileObj]] = []
    cur: list[FileObj] = []
    size = 0
    for o in group:
        if cur and (len(cur) >= BATCH or size + o.alloc > most):
            out.append(cur)
            cur, size = [], 0
        cur.append(o)
        size += o.alloc
    return out + ([cur] if cur else [])


def total(m: Measured, value: Callable[[FileStale], float]) -> tuple[float, float]:
    """An estimated total over every file of ``value(FileStale)``, and its 95% half-width."""
    whole = sum(value(f) for _, f, w in m.sampled if w)
    ys = [value(f) for _, f, w in m.sampled if not w]
    n, big_n = len(ys), m.rest_population
    if not n:
        return float(whole), 0.0
    mean = sum(ys) / n
    est = whole + big_n * mean
    if n < 2:
        return est, float(est)
    s2 = sum((y - mean) ** 2 for y in ys) / (n - 1)
    return est, 1.96 * math.sqrt(max(0.0, 1 - n / big_n) * big_n ** 2 * s2 / n)


# -- the saving a new compression buys ----------------------------------------------------------------

def compressor(name: str):
    """bytes -> compressed length under the ZFS algorithm ``name`` (as a block names it), or None
    where this machine cannot compress with it. zstd-N and zstd-fast-N by the zstd program."""
    if name == "uncompressed":
        return len
    m = re.fullmatch(r"gzip-(\d)", name)
    if m:
        return lambda d: len(zlib.compress(d, int(m.group(1))))
    prog = {"zstd": ["zstd", "-3", "-c", "-q"], "lz4": ["lz4", "-c", "-q"]}.get(name)
    if prog and shutil.which(prog[0]):
        return lambda d: _piped(prog, d)
    return None


def _piped(argv: list[str], data: bytes) -> int:
    """The length of what ``argv`` writes for ``data`` on its input."""
    p = spawn(argv, stdin=PIPE, stdout=PIPE, new_session=False)
    out, _ = p.communicate(data, timeout=60)
    if p.returncode != 0:
        raise RebalError(f"{argv[0]} failed (exit {p.returncode}) compressing a sample block")
    return len(out)


def zstd_level(value: str) -> list[str]:
    m = re.fullmatch(r"zstd-(fast-)?(\d+)", value)
    if not m:
        return ["-3"]
    return [f"--fast={m.group(2)}"] if m.group(1) else [f"-{m.group(2)}"]


def predict_compression(m: Measured, seed: int = 0, budget: int = PREDICT_BYTES) -> dict | None:
    """Bytes a refresh of compression saves: a seeded sample of the old blocks compressed with the new
    algorithm, each rounded up to the sector (stored uncompressed where it does not save an eighth);
    the fraction saved, applied to the old bytes' estimated total."""
    rows = [(o, b, m.wants[o.dataset]) for o, f, _ in m.sampled for b, old in f.blocks if old]
    if not rows:
        return None
    algos = {w.compression for _, _, w in rows}
    if len(algos) > 1:
        return {"predicted": False, "why": f"the datasets differ in compression ({', '.join(sorted(algos))})"}
    algo = algos.pop()
    comp = compressor(algo)
    if algo == "zstd" and comp is not None:
        level = zstd_level(rows[0][2].values.get("compression", "zstd"))
        comp = lambda d: _piped(["zstd", *level, "-c", "-q"], d)  # noqa: E731
    if comp is None:
        return {"predicted": False, "why": f"this machine has no {algo} compressor to measure with"}
    random.Random(seed).shuffle(rows)
    before, after, used = 0, 0.0, 0  # (after: a share of each block's size)
    for o, b, _w in rows:
        if used >= budget:
            break
        data = _reader(o.path)(b)()
        if data is None:
            continue
        data += bytes(b.lsize - len(data))  # a file's last block: zeros past its end
        used += len(data)
        c = comp(data)
        psize = b.lsize if c > b.lsize - b.lsize // 8 else min(b.lsize, -(-c // m.sector) * m.sector)
        before += b.asize
        after += b.asize * psize / b.psize if b.psize else b.asize
    if not before:
        return {"predicted": False, "why": "no old block could be read"}
    old_total, half = total(m, lambda f: f.by_reason.get("compression", 0))
    frac = (before - after) / before
    return {"predicted": True, "algorithm": algo, "sampled_bytes": used, "saved_fraction": round(frac, 4),
            "old_bytes": int(old_total), "saved_bytes": int(old_total * frac),
            "how": f"{used} bytes of old blocks compressed with {algo}, block by block, rounded to {m.sector}-byte sectors"}
