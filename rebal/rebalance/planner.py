"""What to rewrite, and what the pool will look like after. Pure functions: data in, data out.

The model of ZFS (DESIGN.md, fact 1): new writes are spread over the data vdevs weighted by their
free space; rewriting a file frees its old blocks where they lived. Where the old blocks of the files
to rewrite live is not known without zdb, so they are taken to lie like the pool's allocated space at
the start (old data is what made the old vdevs full). Blocks pinned by snapshots are written again
but not freed. The rewrite is simulated in small steps because the weights change as it goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

STEPS = 200


@dataclass(frozen=True, slots=True)
class VdevFill:
    name: str
    size: int
    alloc: int
    space: int = 0  # what ZFS allocates from (zpool's ALLOC + FREE: its metaslabs); 0: ``size``

    @property
    def cap(self) -> float:
        return 100.0 * self.alloc / self.size if self.size else 0.0


def spread(vdevs: list[VdevFill]) -> float:
    caps = [v.cap for v in vdevs if v.size]
    return max(caps) - min(caps) if len(caps) >= 2 else 0.0


def limits(vdevs: list[VdevFill], threshold: int | None) -> list[float] | None:
    """Steered (``threshold``: zfs_mg_noalloc_threshold, DESIGN.md fact 23): the allocation above
    which each vdev takes no new data while another vdev is under its own. ZFS leaves a vdev out
    whose free space in whole percent of what it allocates from, rounded down, is at or below the
    threshold: (space - alloc) * 100 // (space + 1) <= threshold."""
    if threshold is None:
        return None
    out = []
    for v in vdevs:
        space = v.space or v.size
        out.append(space - (threshold + 1) * (space + 1) / 100)
    return out


def shares(alloc: list[float], size: list[float], steer: list[float] | None = None) -> tuple[list[float], float]:
    """(the weight of each vdev in a new write, the pool's free bytes). ZFS weights a write by free
    space; steered, only the vdevs at or under their limit (``limits``) take it while any is."""
    free = [max(s - a, 0.0) for s, a in zip(size, alloc)]
    if steer is not None:
        above = [f if a <= lim else 0.0 for f, a, lim in zip(free, alloc, steer)]
        if sum(above) > 0:
            return above, sum(free)
    return free, sum(free)


def simulate(vdevs: list[VdevFill], rewrite: int, pinned_fraction: float = 0.0, steps: int = STEPS,
             threshold: int | None = None) -> list[VdevFill]:
    """Per-vdev fill after rewriting ``rewrite`` bytes of old data (``threshold``: steered)."""
    if rewrite <= 0 or not vdevs:
        return list(vdevs)
    total_alloc = sum(v.alloc for v in vdevs) or 1
    source = [v.alloc / total_alloc for v in vdevs]  # where the old data lies
    alloc = [float(v.alloc) for v in vdevs]
    size = [float(v.size) for v in vdevs]
    step = rewrite / steps
    steer = limits(vdevs, threshold)
    for _ in range(steps):
        weight, total_free = shares(alloc, size, steer)
        if total_free <= step:
            break  # the pool is full: the model stops where ZFS would fail
        total_w = sum(weight)
        for i in range(len(alloc)):
            alloc[i] += step * weight[i] / total_w  # the new copy
        for i in range(len(alloc)):
            alloc[i] = max(0.0, alloc[i] - step * (1.0 - pinned_fraction) * source[i])  # the old copy
    return [replace(v, alloc=round(a)) for v, a in zip(vdevs, alloc)]


def bytes_to_target(
    vdevs: list[VdevFill], target: float, available: int, pinned_fraction: float = 0.0, threshold: int | None = None
) -> int | None:
    """Fewest bytes of old data to rewrite for the spread to fall under ``target`` (None: not
    reachable by rewriting ``available`` bytes).

    The spread first falls, then may rise again (rewriting everything can overshoot: the new vdevs
    end up fuller than the old), so the trajectory is walked rather than only its end looked at:
    100 points, the first under the target bracketed with the point before it and bisected. One
    simulation along the whole way finds that point; the bracket is checked with the simulation
    itself and, where it does not hold, the first point is looked for next to it (``_near_first``),
    not with a simulation per point."""
    if spread(vdevs) <= target:
        return 0
    if available <= 0:
        return None
    n = 100

    def under(i: int) -> bool:
        return spread(simulate(vdevs, available * i // n, pinned_fraction, threshold=threshold)) <= target

    first = _near_first(under, _first_under(vdevs, target, available, pinned_fraction, n, threshold), n)
    if first is None:
        return None
    lo, hi = available * (first - 1) // n, available * first // n  # the spread falls through the target here
    while hi - lo > max(available // 10000, 1 << 20):
        mid = (lo + hi) // 2
        if spread(simulate(vdevs, mid, pinned_fraction, threshold=threshold)) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def _near_first(under: Callable[[int], bool], guess: int, n: int, reach: int = 4) -> int | None:
    """The first point under the target, looked for from ``guess`` (the one-pass simulation's, whose
    steps differ from ``simulate``'s: near the target the two can differ by a point): down while the
    point before is under too, or up a few points; only where that finds nothing is every point
    simulated from nothing."""
    i = min(guess, n)
    if under(i):
        while i > 1 and under(i - 1):
            i -= 1
        return i
    for j in range(i + 1, min(n, i + reach) + 1):
        if under(j):
            return j
    return next((k for k in range(1, n + 1) if under(k)), None)


def _first_under(vdevs: list[VdevFill], target: float, available: int, pinned_fraction: float, n: int,
                 threshold: int | None = None) -> int:
    """The first of the n points at which one simulation, run once along the whole way, is under the
    target (n + 1: none): where bytes_to_target starts its walk, rather than simulating from nothing
    at each point."""
    if not vdevs:
        return 1
    total_alloc = sum(v.alloc for v in vdevs) or 1
    source = [v.alloc / total_alloc for v in vdevs]
    alloc = [float(v.alloc) for v in vdevs]
    size = [float(v.size) for v in vdevs]
    per = 20  # steps between points
    step = available / (n * per)
    steer = limits(vdevs, threshold)
    for i in range(1, n + 1):
        for _ in range(per):
            weight, total_free = shares(alloc, size, steer)
            if total_free <= step:
                return i
            total_w = sum(weight)
            for j in range(len(alloc)):
                alloc[j] = max(0.0, alloc[j] + step * weight[j] / total_w - step * (1.0 - pinned_fraction) * source[j])
        if spread([replace(v, alloc=round(a)) for v, a in zip(vdevs, alloc)]) <= target:
            return i
    return n + 1


@dataclass(frozen=True, slots=True)
class DirEntry:
    path: bytes
    files: int
    bytes: int  # apparent size of its files
    alloc: int = -1  # space its files take (holes and compression left out); -1: as ``bytes``
    # measured: its allocated bytes per data vdev (pool order), from block pointers (a sample of its
    # files, scaled to ``moves``); None: not measured, taken to lie like the pool's allocation
    placement: tuple[int, ...] | None = None

    @property
    def moves(self) -> int:
        """Bytes a rewrite of this directory moves, for the model."""
        return self.bytes if self.alloc < 0 else self.alloc


@dataclass
class Plan:
    before: list[VdevFill]
    after: list[VdevFill]  # predicted, after rewriting the chosen directories
    dirs: list[DirEntry]  # chosen, in the order they will be rewritten
    candidate_bytes: int  # all eligible data under the targets
    needed_bytes: int | None  # to reach the target; None if not reachable
    target: float
    pinned_fraction: float = 0.0
    notes: list[str] = field(default_factory=list)
    ranked: list[DirEntry] = field(default_factory=list)  # measured: every directory, in the order to rewrite
    measured: bool = False  # the order and prediction come from measured placement
    everything: bool = False  # --all: every directory is chosen and predicted, whatever the target
    threshold: int | None = None  # steered: the zfs_mg_noalloc_threshold the prediction is for

    @property
    def spread_before(self) -> float:
        return spread(self.before)

    @property
    def spread_after(self) -> float:
        return spread(self.after)

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.dirs)

    @property
    def moved(self) -> int:
        """Bytes that leave the vdevs that lose data: what has to move, of what is rewritten."""
        after = {v.name: v.alloc for v in self.after}
        return sum(max(0, v.alloc - after.get(v.name, v.alloc)) for v in self.before)

    @property
    def files(self) -> int:
        return sum(d.files for d in self.dirs)


def order_dirs(dirs: list[DirEntry]) -> list[DirEntry]:
    """Largest directories first (the most data moved per re-measurement), then by path."""
    return sorted((d for d in dirs if d.files), key=lambda d: (-d.bytes, d.path))


def overfull(vdevs: list[VdevFill]) -> list[bool]:
    """The vdevs fuller than the pool as a whole: the ones a rewrite should take data from."""
    total = sum(v.size for v in vdevs) or 1
    mean = 100.0 * sum(v.alloc for v in vdevs) / total
    return [v.cap > mean for v in vdevs]


GAIN_STEPS = 20  # gains within 1/20 of the best are one rank: the order holds between plan and run


def rank_measured(vdevs: list[VdevFill], dirs: list[DirEntry]) -> list[DirEntry]:
    """Directories by how much of their data lies on the over-full vdevs, per byte (measured where
    known, else the model's guess: like the pool's allocation), weighted by how far over the pool's
    CAP each vdev is; most first, then by size and path. Per byte, not in bytes: a big directory
    written after the pool grew lies partly on the new vdev, and rewriting it moves less per byte
    rewritten than a smaller one that lies wholly on the full vdevs (the goal is fewest bytes).

    The gains are ranked in steps of a twentieth of the best one, then by size: the plan and the run
    each measure the pool, and two old vdevs a few tenths of a point apart swap their weights from
    one to the other; ranked exactly, directories that differ only in how they split between those
    two came out in another order in the run than the plan said."""
    total = sum(v.size for v in vdevs) or 1
    mean = 100.0 * sum(v.alloc for v in vdevs) / total
    excess = [max(0.0, v.cap - mean) for v in vdevs]
    total_alloc = sum(v.alloc for v in vdevs) or 1
    pool_share = [v.alloc / total_alloc for v in vdevs]

    def gain(d: DirEntry) -> float:
        if d.placement is None or not sum(d.placement):
            share = pool_share
        else:
            tot = sum(d.placement)
            share = [b / tot for b in d.placement]
        return sum(s * e for s, e in zip(share, excess))
    gains = {d.path: gain(d) for d in dirs if d.files}
    unit = (max(gains.values(), default=0.0) / GAIN_STEPS) or 1.0
    return sorted((d for d in dirs if d.files), key=lambda d: (-round(gains[d.path] / unit), -d.bytes, d.path))


def _rewrite_dir(alloc: list[float], size: list[float], source: list[float], d: DirEntry, pinned_fraction: float,
                 step: float, steer: list[float] | None = None) -> bool:
    """Rewrite one directory in the model: the new copy by free space, the old freed where it lies."""
    if d.placement is not None and any(d.placement):
        tot = sum(d.placement)
        where = [b / tot for b in d.placement]
    else:
        where = source
    left = float(d.moves)
    while left > 0:
        n = min(step, left)
        left -= n
        weight, total_free = shares(alloc, size, steer)
        if total_free <= n:
            return False
        total_w = sum(weight)
        for i in range(len(alloc)):
            alloc[i] += n * weight[i] / total_w
            alloc[i] = max(0.0, alloc[i] - n * (1.0 - pinned_fraction) * where[i])
    return True


class DirModel:
    """The measured-placement model, one directory folded in at a time: ``simulate_dirs`` without
    starting over. A run asks the model after every directory; simulating every directory done so
    far each time would make a run over many small directories quadratic in their number."""

    def __init__(self, vdevs: list[VdevFill], pinned_fraction: float = 0.0, threshold: int | None = None) -> None:
        self.vdevs = vdevs
        self.alloc = [float(v.alloc) for v in vdevs]
        self.size = [float(v.size) for v in vdevs]
        total_alloc = sum(self.alloc) or 1.0
        self.source = [a / total_alloc for a in self.alloc]
        self.step = max(1.0, sum(self.size) / (2 * STEPS))
        self.pinned_fraction = pinned_fraction
        self.steer = limits(vdevs, threshold)
        self.full = False  # a directory found no room: the model stops there (as the plan does)

    def add(self, d: DirEntry) -> bool:
        """Rewrite ``d`` in the model; False (and nothing more is added) once the pool is full."""
        if not self.full and not _rewrite_dir(self.alloc, self.size, self.source, d, self.pinned_fraction, self.step,
                                               self.steer):
            self.full = True
        return not self.full

    def copy(self) -> DirModel:
        other = DirModel.__new__(DirModel)
        other.__dict__.update(self.__dict__)
        other.alloc = list(self.alloc)
        return other

    def fills(self) -> list[VdevFill]:
        return [replace(v, alloc=round(a)) for v, a in zip(self.vdevs, self.alloc)]


def simulate_dirs(vdevs: list[VdevFill], dirs: list[DirEntry], pinned_fraction: float = 0.0,
                  threshold: int | None = None) -> list[VdevFill]:
    """Per-vdev fill after rewriting these directories, each with its measured placement."""
    model = DirModel(vdevs, pinned_fraction, threshold)
    for d in dirs:
        if not model.add(d):
            break
    return model.fills()


def plan_measured(vdevs: list[VdevFill], dirs: list[DirEntry], target: float, *, max_bytes: int | None = None,
                  pinned_fraction: float = 0.0, everything: bool = False, threshold: int | None = None) -> Plan:
    """The plan where placement was measured: directories in the order of the data they hold on the
    over-full vdevs, each simulated with its own placement, until the spread is under the target
    (``everything``: every directory, the point where the target is reached still noted)."""
    ranked = rank_measured(vdevs, dirs)
    alloc = [float(v.alloc) for v in vdevs]
    size = [float(v.size) for v in vdevs]
    total_alloc = sum(alloc) or 1.0
    source = [a / total_alloc for a in alloc]
    step = max(1.0, sum(size) / (2 * STEPS))
    steer = limits(vdevs, threshold)
    chosen: list[DirEntry] = []
    moved = 0
    needed: int | None = 0 if spread(vdevs) <= target else None
    while (needed is None or everything) and len(chosen) < len(ranked):
        d = ranked[len(chosen)]
        if max_bytes is not None and moved + d.moves > max_bytes and chosen:
            break
        if not _rewrite_dir(alloc, size, source, d, pinned_fraction, step, steer):
            break
        chosen.append(d)
        moved += d.moves
        if needed is None and spread([replace(v, alloc=round(a)) for v, a in zip(vdevs, alloc)]) <= target:
            needed = moved
    return Plan(before=list(vdevs), after=[replace(v, alloc=round(a)) for v, a in zip(vdevs, alloc)],
                dirs=chosen, candidate_bytes=sum(d.bytes for d in ranked), needed_bytes=needed, target=target,
                pinned_fraction=pinned_fraction, ranked=ranked, measured=True, everything=everything,
                threshold=threshold)


def make_plan(
    vdevs: list[VdevFill],
    dirs: list[DirEntry],
    target: float,
    *,
    max_bytes: int | None = None,
    pinned_fraction: float = 0.0,
    everything: bool = False,
    threshold: int | None = None,
) -> Plan:
    """The directories to rewrite, fullest-first, until the model says the spread is under ``target``
    (within ``max_bytes``); ``everything`` (--all): every directory, and the prediction is of them
    all (a run of --all rewrites them all: a prediction of the target's bytes only was not what it did)."""
    if any(d.placement is not None for d in dirs):
        return plan_measured(vdevs, dirs, target, max_bytes=max_bytes, pinned_fraction=pinned_fraction,
                             everything=everything, threshold=threshold)
    ordered = order_dirs(dirs)
    candidate = sum(d.bytes for d in ordered)
    movable = sum(d.moves for d in ordered)
    budget = movable if max_bytes is None else min(movable, max_bytes)
    needed = bytes_to_target(vdevs, target, budget, pinned_fraction, threshold)
    chosen: list[DirEntry] = []
    moved = 0
    limit = needed if needed is not None and not everything else budget
    for d in ordered:
        if (needed == 0 and not everything) or (moved >= limit and limit > 0):
            break
        if max_bytes is not None and moved + d.moves > max_bytes and chosen:
            break
        chosen.append(d)
        moved += d.moves
    return Plan(
        before=list(vdevs),
        after=simulate(vdevs, moved, pinned_fraction, threshold=threshold),
        dirs=chosen,
        candidate_bytes=candidate,
        needed_bytes=needed,
        target=target,
        pinned_fraction=pinned_fraction,
        everything=everything,
        threshold=threshold,
    )
