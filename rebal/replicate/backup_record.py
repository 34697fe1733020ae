"""A changed run on a backup dataset of many snapshots, without listing them: rebal's record of the
dataset's snapshots as its last run left them, trusted while the backup's `snapshots_changed` still
says what it said then.

Listing a received, unmounted backup's snapshots is most of a changed run's time on a dataset of
thousands (64 s of 94 s at 10,000 under TCG, bench/RESULTS.md). OpenZFS (2.2 and later) keeps per
dataset `snapshots_changed`: the time a snapshot of it was last made, destroyed or renamed (a
receive makes one, a rollback destroys), in seconds. One `zfs list` of the datasets a run would
list reads it with their resume tokens (about 80 ms a dataset there, whatever its snapshots).

- After a run, each backup dataset of at least MANY snapshots that the run sent to is recorded
  (the state's kv table): its snapshots as the run left them (what it had, what landed, less what
  its prune destroyed) and `snapshots_changed` read after the run's last change there.
- The next run reads `snapshots_changed` and `receive_resume_token` of the datasets it would list
  that have a record: where the value is the record's and no token is there, the record stands for
  the listing. Any other answer, a ZFS without the property (zfs-fuse, OpenZFS before 2.2) or no
  answer: the dataset is listed, as before.
- A record is forgotten before a run sends to its dataset, so a run cut between a change and its
  record leaves none, and the next run lists.
- A record descends from a real listing at most RELIST seconds old: past that, the dataset is
  listed again (what a record can miss, below, lives at most that long).

What a record cannot see, and what guards it: the value has one-second granularity (OpenZFS 2.4
has no `snapshots_changed_nsecs`), so a change by another actor on the backup in the same second
as the run's read, after it, goes unseen (as does one between the run's first read and its own
change there). Whatever that change was:
- a snapshot made there is the backup's newest, and an incremental receive (rebal's, without -F)
  refuses a base that is not the newest: the dataset fails that run, its record is gone, the next
  run lists it;
- a snapshot destroyed there is never trusted where it matters: a base is asked of the backup by
  name and guid every run (unchanged.first_questions) and a receive onto a missing base fails; the
  snapshots the source's retention would destroy because the backup has them are asked of the
  backup by name and guid first (``confirmed``); what is left is the backup's own retention, which
  may count the missing one among those it keeps, until RELIST.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from .policy import Snap

if TYPE_CHECKING:
    from .zfs_run import Replicating

MANY = 32  # snapshots from which reading `snapshots_changed` twice a run costs less than the listing
RELIST = 7 * 86400  # seconds: a record descends from a real listing at most this old


def key(job: str, target: str) -> str:
    return f"backup-snapshots:{job}:{target}"


def _load(rep: Replicating, target: str) -> dict | None:
    if rep.cache is None:
        return None
    raw = rep.cache.get(key(rep.job.name, target), max_age=RELIST)
    try:
        rec = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(rec, dict) or time.time() - rec.get("listed", 0) > RELIST:
        return None
    return rec


def from_record(rep: Replicating, targets: list[str]) -> dict[str, list[Snap]]:
    """Of ``targets`` (backup datasets a run would list), those whose record still stands, with the
    snapshots it holds (oldest first); the rest are to be listed. Sets ``rep.recorded``."""
    recs = {t: r for t in targets if (r := _load(rep, t)) is not None}
    if not recs:
        return {}
    marks = rep.target.snapshot_marks(sorted(recs))
    if marks is None:  # no `snapshots_changed` on the backup: the records are of no use there
        return {}
    out = {}
    for t, rec in recs.items():
        mark = marks.get(t)
        if mark is not None and mark == (rec.get("changed"), ""):
            out[t] = [Snap(n, g, x) for n, g, x in rec.get("snaps", [])]
            rep.recorded[t] = rec["listed"]
    return out


def forget(rep: Replicating, targets: list[str]) -> None:
    """Before a run changes these backup datasets: their records go (a run cut after its change and
    before its record leaves none)."""
    if rep.cache is None:
        return
    for t in targets:
        rep.cache.forget(key(rep.job.name, t))


def keep(rep: Replicating) -> int:
    """After the run's last change on the backup (its sends and its prune): a record of each backup
    dataset it sent to whole (or found holding what it would have sent) that holds MANY snapshots
    or more, from the backup's `snapshots_changed` read now. Returns how many were recorded."""
    landed = [rep.target_of(d.source) for d in rep.report.datasets if d.kind in ("full", "incremental", "nothing")]
    big = [t for t in landed if len(rep.target_tree.get(t, [])) >= MANY]
    if rep.cache is None or rep.dry_run or not big or not rep.may_skip():  # (only a run that may
        return 0  # skip unchanged datasets, OpenZFS's, plans from a record: none on zfs-fuse)
    marks = rep.target.snapshot_marks(big)
    if not marks:
        return 0
    now = time.time()
    n = 0
    for t in big:
        changed, token = marks.get(t, (None, "-"))
        if changed is None or token:
            continue
        rec = {"changed": changed, "listed": rep.recorded.get(t, now),
               "snaps": [[s.name, s.guid, s.txg] for s in rep.target_tree[t] if not s.bookmark]}
        rep.cache.set(key(rep.job.name, t), json.dumps(rec, separators=(",", ":")))
        n += 1
    return n


def confirmed(rep: Replicating, drops: dict[str, list[str]],
              guid_of: dict[str, dict[str, int]]) -> dict[str, list[str]]:
    """Of the source's ``drops`` (dataset -> snapshot names its retention would destroy), those whose
    backup came from a record keep only the names the backup still holds with the same guid (asked
    by name, one command): the source never destroys what the backup lost behind a record.
    ``guid_of``: dataset -> name -> the source snapshot's guid."""
    asked = {f"{rep.target_of(ds)}@{n}": (ds, n) for ds, names in drops.items()
             if rep.target_of(ds) in rep.recorded for n in names}
    if not asked:
        return drops
    held = rep.target.guids(sorted(asked))
    out: dict[str, list[str]] = {}
    for ds, names in drops.items():
        if rep.target_of(ds) not in rep.recorded:
            out[ds] = names
            continue
        t = rep.target_of(ds)
        theirs = guid_of.get(ds, {})
        ok = [n for n in names if (g := held.get(f"{t}@{n}")) is not None and g == theirs.get(n)]
        if len(ok) < len(names):
            rep.report.notes.append(f"kept {len(names) - len(ok)} snapshot(s) of {ds} on the source that "
                                    f"retention would prune: the backup ({t}) no longer holds them")
        if ok:
            out[ds] = ok
    return out
