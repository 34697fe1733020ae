"""What a rebalance or a plan is asked to do (Options) and where (Target): the config's [rebalance]
table with what the command line overrides, checked in one place (options_from), each error
naming the option to mend."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import RebalError, UsageError
from .scan import Filters

if TYPE_CHECKING:
    from ..config import Config, Replicate


class RefusedError(RebalError):
    exit_code = 2


@dataclass
class Options:
    targets: list[str]
    target_spread: float = 10.0
    max_bytes: int | None = None
    until: float | None = None  # epoch seconds
    max_rate: float | None = None
    verify: str = "hash"
    method: str = "auto"
    jobs: int = 0
    allow_snapshots: bool = False
    max_growth: int | None = None  # with allow_snapshots: how much the pool may grow (None: the reserve decides)
    rewrite_all: bool = False  # every eligible file, whatever the spread (after a RAIDZ expansion, say)
    hardlinks: bool = False  # re-create hardlink groups whose every name lies in the targets
    reserve_percent: float = 10.0
    filters: Filters = field(default_factory=Filters)
    replication_jobs: list[Replicate] = field(default_factory=list)  # the config's [[replicate]] jobs (costs of a rewrite)
    placement: str = "auto"  # measured (zdb, block pointers), model, or auto: measured where zdb can read
    measure_seconds: float = 30.0  # time limit of the measurement
    listing: bool = False  # a run follows (not a plan): the scan keeps the first directories' files for it
    purpose: str = "balance"  # or "refresh": rewrite the files the filters name, on any pool, no spread goal
    steer: bool = True  # steer the allocator to the emptier vdevs during the run (steer.py), where ZFS can


@dataclass
class Target:
    dataset: str
    mountpoint: str
    root: bytes  # the directory to rewrite (the mountpoint, or a directory below it)


METHODS = ("auto", "copy", "rewrite")
PLACEMENTS = ("auto", "measured", "model")
VERIFIES = ("hash", "size", "none")


def options_from(cfg: Config, targets: list[str], *, target_spread: float | None = None, max_bytes: str | None = None,
                 until: str | None = None, max_rate: str | None = None, verify: str | None = None,
                 method: str | None = None, jobs: int | None = None, exclude: list[str] | None = None,
                 min_age: float | None = None, min_size: str | None = None, max_size: str | None = None,
                 allow_snapshots: bool = False, max_growth: str | None = None, hardlinks: bool = False,
                 rewrite_all: bool = False, placement: str = "auto", listing: bool = False,
                 no_steer: bool = False) -> Options:
    """The options of a rebalance or a plan: the config's [rebalance] table, with what the command
    line overrides (its option names, its text as typed; None or False: the config decides). The one
    place where either becomes Options, checked, each error naming the option to mend."""
    from ..units import parse_size

    rb = cfg.rebalance
    spread = rb.target_spread if target_spread is None else target_spread
    if not 0 < spread <= 100:
        raise UsageError("--target-spread must be more than 0 and at most 100")
    if jobs is not None and not 1 <= jobs <= 64:
        raise UsageError("--jobs must be between 1 and 64")
    filters = Filters(
        exclude=tuple(rb.exclude) + tuple(exclude or ()),
        min_age_days=rb.min_age_days if min_age is None else min_age,
        min_size=parse_size(min_size) if min_size else 0,
        max_size=parse_size(max_size) if max_size else None,
    )
    if filters.max_size is not None and filters.min_size > filters.max_size:
        raise UsageError(f"--min-size {min_size} is more than --max-size {max_size}: no file could be rewritten")
    growth = max_growth or rb.max_growth
    rate = max_rate or rb.max_rate
    return Options(
        targets=list(targets), target_spread=spread, max_bytes=parse_size(max_bytes) if max_bytes else None,
        until=until_epoch(until) if until else None, max_rate=parse_size(rate) if rate else None,
        verify=_one_of("--verify", verify or rb.verify, VERIFIES),
        method=_one_of("--method", method or rb.method, METHODS), jobs=jobs or rb.jobs,
        allow_snapshots=allow_snapshots or rb.allow_snapshots, max_growth=parse_size(growth) if growth else None,
        rewrite_all=rewrite_all, hardlinks=hardlinks or rb.hardlinks, reserve_percent=rb.reserve_percent,
        filters=filters, replication_jobs=list(cfg.replicate), placement=_one_of("--placement", placement, PLACEMENTS),
        listing=listing, steer=rb.steer and not no_steer)


# the command-line options options_from takes (by name): a command passes what it was given of these
PLANNER_OPTIONS = frozenset(inspect.signature(options_from).parameters) - {"cfg", "targets"}


def _one_of(opt: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise UsageError(f"{opt} must be one of: {', '.join(allowed)}")
    return value


def until_epoch(hhmm: str, now: datetime | None = None) -> float:
    """The next time of day HH:MM (local time) as epoch seconds."""
    m = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", hhmm.strip())
    if not m:
        raise UsageError(f"--until {hhmm!r}: give a time of day as HH:MM")
    now = now or datetime.now().astimezone()
    t = now.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0)
    if t <= now:
        t = t.fromtimestamp(t.timestamp() + 86400, tz=t.tzinfo)
    return t.timestamp()
