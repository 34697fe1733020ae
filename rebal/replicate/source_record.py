"""A no-change run on a tree of many datasets, without listing the source's snapshots: rebal's record of
each chosen dataset's base (the job's newest snapshot or bookmark there, the one that landed on the
backup), trusted while the source's `snapshots_changed` says what it said when they were listed.

A no-change run (unchanged.first_questions) lists the source's snapshots and bookmarks only to find
each dataset's base: the job's newest point there, which must be the one rebal's record says landed,
and its guid, which the backup's copy must have. On a tree of hundreds that listing is a good part
of the run (every dataset opened, every snapshot read). OpenZFS (2.2 and later) keeps per dataset
`snapshots_changed`: the time, in seconds, a snapshot of it was last made, destroyed or renamed.

- A no-change run that listed the source, every chosen dataset sitting out, records each dataset's
  base with its `snapshots_changed` read before the listing (one `zfs list` of the datasets, asked
  only where every dataset's `written@` since what landed is already 0).
- The next run reads `snapshots_changed` as one more column of the listing it makes anyway (the
  selection with `written@`: no command more); where every chosen dataset's value is the record's,
  its base is the recorded one and nothing was written since it, the record stands for the listing.
  The backup is asked for every base by name and guid as before. Anything else: the source is listed.
- Only where the source is this host (a push job: its clock is ZFS's), and only a value at least two
  seconds older than its reading: a change after the reading then has another value, whatever the
  one-second granularity. A record descends from a listing at most RELIST old.

Nothing is sent, pruned or destroyed on a record's word: a run with anything to send lists the
source. What the record could still miss (a base destroyed and made again by the same name, within
a second): the backup's guid of the base is asked every run, and a receive onto another base fails.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from ..errors import HostError
from .policy import Snap

if TYPE_CHECKING:
    from .zfs_run import Replicating

RELIST = 7 * 86400  # seconds: a record descends from a real listing at most this old
FRESH = 2  # seconds: a `snapshots_changed` this close to its reading is not recorded
PROPERTY = "snapshots_changed"


def key(job: str) -> str:
    return f"source-bases:{job}"


def _usable(rep: Replicating) -> bool:
    return rep.cache is not None and not rep.job.pull and not rep.dry_run


def load(rep: Replicating) -> dict | None:
    """The job's record of the source's bases, where one stands a chance (a push job, at most
    RELIST old); None otherwise."""
    if not _usable(rep) or rep.cache is None:
        return None
    raw = rep.cache.get(key(rep.job.name), max_age=RELIST)
    try:
        rec = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("marks"), dict) or not isinstance(rec.get("bases"), dict):
        return None
    listed = rec.get("listed")
    return rec if isinstance(listed, (int, float)) and time.time() - listed <= RELIST else None


def forget(rep: Replicating) -> None:
    """The record goes where this zfs would not answer the selection's listing with the property (a
    zfs without it since): the next runs ask without it."""
    if rep.cache is not None:
        rep.cache.forget(key(rep.job.name))


def base(rec: dict, ds: str) -> Snap | None:
    b = rec["bases"].get(ds)
    if not isinstance(b, list) or len(b) != 4 or not all(isinstance(v, int) for v in b[1:3]):
        return None
    return Snap(str(b[0]), b[1], b[2], bool(b[3]))


def stands(rep: Replicating, rec: dict, datasets: list[str],
           written: dict[tuple[str, str], int]) -> dict[str, list[Snap]] | None:
    """The source's listing as the record holds it (each of ``datasets`` with its base alone), where
    every one's `snapshots_changed` (in ``written``, the selection's columns) is the record's, its
    base is what landed and nothing was written since it; else None (the source is listed)."""
    tree = {}
    for ds in datasets:
        b = base(rec, ds)
        mark = written.get((ds, PROPERTY))
        if b is None or mark is None or mark != rec["marks"].get(ds) or b.name != rep.landed.get(ds):
            return None
        if written.get((ds, ("written#" if b.bookmark else "written@") + b.name)) != 0:
            return None
        tree[ds] = [b]
    return tree


def marks_in(written: dict[tuple[str, str], int]) -> dict[str, int]:
    """The `snapshots_changed` of each dataset among the selection's columns."""
    return {ds: v for (ds, prop), v in written.items() if prop == PROPERTY}


def marks_of(rep: Replicating, datasets: list[str]) -> dict[str, int] | None:
    """The source's `snapshots_changed` of ``datasets`` (None: this zfs has none, or it would not
    answer: a speed-up never fails a run, nothing is recorded then)."""
    try:
        got = rep.source.snapshot_marks(datasets)
    except HostError:
        return None
    return None if got is None else {ds: changed for ds, (changed, _) in got.items()}


def worth_marking(rep: Replicating, datasets: list[str], written: dict[tuple[str, str], int] | None) -> bool:
    """Whether a run that found no record standing should read the marks before it lists: a push job
    whose every dataset had nothing written since what landed (a no-change run, likely)."""
    if not _usable(rep) or written is None or not datasets:
        return False
    return all(ds in rep.landed and 0 in (written.get((ds, f"written@{rep.landed[ds]}")),
                                          written.get((ds, f"written#{rep.landed[ds]}"))) for ds in datasets)


def keep(rep: Replicating, marks: dict[str, int], read_at: float, same: dict[str, Snap],
         datasets: list[str]) -> bool:
    """After a no-change run that listed the source: its bases with their marks (read at ``read_at``,
    before the listing), where every dataset sat out and every mark is old enough. Whether recorded."""
    if not _usable(rep) or rep.cache is None or not datasets or set(same) != set(datasets):
        return False
    if any((m := marks.get(ds)) is None or m > int(read_at) - FRESH for ds in datasets):
        return False
    rec = {"listed": time.time(), "marks": {ds: marks[ds] for ds in datasets},
           "bases": {ds: [b.name, b.guid, b.txg, b.bookmark] for ds, b in same.items()}}
    rep.cache.set(key(rep.job.name), json.dumps(rec, separators=(",", ":")))
    return True
