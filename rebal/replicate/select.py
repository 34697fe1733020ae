"""Which datasets a replication job takes, and why each of the others is left out.

A job names one `source`. Without `recursive` that dataset is the job. With it, every file system
and volume under it is a candidate, decided parents first:

1. a name matching an `include` pattern is in (it brings a child of an excluded dataset back);
2. a name matching an `exclude` pattern is out, and so is everything under it (unless included again);
3. with `by_property`, the ZFS user property `rebal:backup` decides, as zfs_autobackup's
   `autobackup:NAME` does: set it to the job's name (or a comma list of job names) on a dataset and
   its children inherit it; `false` (or any value not naming the job) on a child leaves it out, and
   the job's name on a grandchild brings that one back. Unset is out.
4. otherwise it is in.

Patterns are shell patterns (`fnmatch`) on the whole dataset name: `*` also matches `/`, so
`*/cache` is every dataset named cache at any depth. One `zfs list` answers names and the property.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Protocol

from .. import names
from ..names import BACKUP_PROPERTY as PROPERTY

if TYPE_CHECKING:
    from ..zfs.host import ZfsHost

OFF = ("false", "off", "no", "none")
BAD_NAME = "a name rebal cannot take"  # a dataset left out for its name: the run says so as a warning


@dataclass(frozen=True, slots=True)
class Choice:
    dataset: str
    included: bool
    why: str


@dataclass
class Selection:
    source: str
    choices: list[Choice] = field(default_factory=list)

    @property
    def included(self) -> list[str]:
        return [c.dataset for c in self.choices if c.included]

    @property
    def excluded(self) -> list[Choice]:
        return [c for c in self.choices if not c.included]

    @property
    def whole(self) -> bool:
        """Every dataset under the source is in: one recursive snapshot covers the job."""
        return all(c.included for c in self.choices)

    def lines(self) -> list[str]:
        return [f"{'in ' if c.included else 'out'} {c.dataset}  ({c.why})" for c in self.choices]


def _match(name: str, patterns: Sequence[str]) -> str | None:
    return next((p for p in patterns if fnmatchcase(name, p)), None)


def decide(rows: list[tuple[str, str]], job: str, *, exclude: Sequence[str] = (), include: Sequence[str] = (),
           by_property: bool = False) -> list[Choice]:
    """Pure: the choice for each (dataset, rebal:backup value) row, parents first. ``rows`` holds the
    source and its children; the value is what `zfs list -o name,rebal:backup` prints ("-": unset)."""
    rows = sorted(rows, key=lambda r: (r[0].count("/"), r[0]))
    value = dict(rows)
    out: list[Choice] = []
    cut: dict[str, str] = {}  # dataset excluded by a pattern -> the pattern (its children follow it)
    for name, val in rows:
        parent = name.rsplit("/", 1)[0] if "/" in name else None
        problem = names.dataset_problem(name)
        if problem:  # (a space: ZFS takes it, rebal does not): left out and said, the job goes on
            out.append(Choice(name, False, f"{BAD_NAME}: {problem}; rename it (zfs rename) to back it up"))
            continue
        if (p := _match(name, include)):
            out.append(Choice(name, True, f"include pattern {p!r}"))
            continue
        if (p := _match(name, exclude)):
            cut[name] = p
            out.append(Choice(name, False, f"exclude pattern {p!r}"))
            continue
        if parent in cut:
            cut[name] = cut[parent]
            out.append(Choice(name, False, f"under {parent}, excluded by pattern {cut[parent]!r}"))
            continue
        if by_property:
            v = (val or "-").strip()
            how = "inherited" if parent is not None and value.get(parent) == val else "set here"
            wanted = [x.strip() for x in v.split(",")]
            if v == "-":
                out.append(Choice(name, False, f"{PROPERTY} is not set"))
            elif job in wanted:
                out.append(Choice(name, True, f"{PROPERTY}={v} ({how})"))
            elif v.lower() in OFF:
                out.append(Choice(name, False, f"{PROPERTY}={v} ({how})"))
            else:
                out.append(Choice(name, False, f"{PROPERTY}={v} ({how}) names other jobs"))
            continue
        out.append(Choice(name, True, "a child of the source" if parent in value else "the source"))
    return out




class Selecting(Protocol):
    """What the selection reads of a job (a job of the config, zfs_send.Job, rsync.RsyncJob)."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def recursive(self) -> bool: ...
    @property
    def exclude(self) -> Sequence[str]: ...
    @property
    def include(self) -> Sequence[str]: ...
    @property
    def by_property(self) -> bool: ...


def select(job: Selecting, host: ZfsHost, rows: list[tuple[str, str]] | None = None) -> Selection:
    """The selection of a zfs or rsync job (``job`` has source, name, recursive, exclude, include,
    by_property). ``rows``: the (dataset, rebal:backup) listing where the caller has it already."""
    sel = Selection(job.source)
    if not job.recursive:
        sel.choices.append(Choice(job.source, True, "the source"))
        return sel
    sel.choices = decide(host.backup_choices(job.source, True) if rows is None else rows, job.name,
                         exclude=list(job.exclude), include=list(job.include), by_property=job.by_property)
    return sel
