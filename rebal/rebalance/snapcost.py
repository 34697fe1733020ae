"""What snapshots and replication make a rewrite cost, for `rebal plan`, the refusal and the budget.

Pure: figures in (the scan's bytes per snapshot, the snapshots' names, times and `used`, the
config's replication jobs), dicts out. Facts it stands on (OpenZFS man pages, DESIGN.md):
- a block that a snapshot references stays allocated where it is when the file is rewritten, until
  the last such snapshot goes: the pool grows by what is rewritten of it, and the balance improves
  only then;
- a copy-and-rename rewrite, and `zfs rewrite` without -P, give every rewritten block a new birth
  time: all of it goes into the next incremental of every zfs replication job of the dataset;
  `zfs rewrite -P` keeps logical birth times: none of it does. rsync compares size and mtime,
  which a rewrite keeps: nothing is sent again.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..config import Replicate
    from .options import Target
    from .planner import Plan
    from .scan import ScanResult

RUNS = 800  # runs of a job simulated to find when retention drops a snapshot (a daily job: two years)

# other tools' snapshot names (the prefix they use by default)
KNOWN = (("autosnap_", "sanoid"), ("zfs-auto-snap_", "zfs-auto-snapshot"), ("zrepl_", "zrepl"),
         ("pyznap_", "pyznap"), ("znap_", "znapzend"), ("syncoid_", "syncoid"))



class Planned(Protocol):
    """What the costs are read from: a prepared run (prepare.Prepared), as far as they need it."""

    targets: list[Target]
    snapshots: list[tuple[str, int, int]]  # (dataset@name, creation, used), oldest first
    scan: ScanResult
    plan: Plan
    method: str
    physical: bool
    available: int
    reserve: int

def owner_of(snap: str, jobs: list[str]) -> tuple[str, str | None]:
    """("rebal:<job>", None) for a snapshot of a configured rebal job, else ("other", tool or None)."""
    from ..replicate.policy import parse_snapshot_name

    p = parse_snapshot_name(snap)
    if p is not None and p[0] in jobs:
        return f"rebal:{p[0]}", None
    for prefix, tool in KNOWN:
        if snap.startswith(prefix):
            return "other", f"{tool} ({prefix}*)"
    return "other", None


def expiry(snap: str, job: Replicate, existing: list[str], now: datetime) -> tuple[str | None, str]:
    """When retention of ``job`` (a config.Replicate) destroys its snapshot ``snap``: (ISO time or
    None, words). Simulates the job's next runs on its schedule against its source retention."""
    from ..replicate.job import buckets
    from ..replicate.policy import parse_snapshot_name, retain, snapshot_name, snapshot_time

    rules = buckets(job.retention_source)
    if not job.schedule:
        when = "at the next run of job " + job.name
        keep = retain([(s, snapshot_time(s)) for s in existing + [snapshot_name(job.name, now)]],
                      rules, {snapshot_name(job.name, now)})
        return None, (when if snap not in keep else f"kept by job {job.name}'s retention for several runs")
    from datetime import timedelta

    from ..config import cron_trigger

    trig = cron_trigger(job.schedule, timezone=datetime.now().astimezone().tzinfo)  # as the scheduler reads it
    names = [(s, snapshot_time(s)) for s in existing if parse_snapshot_name(s)]
    t, prev = now, None
    for _ in range(RUNS):
        t = trig.get_next_fire_time(prev, t)
        if t is None:
            break
        t = t.astimezone(timezone.utc)
        new = snapshot_name(job.name, t)
        names.append((new, t))
        if snap not in retain(names, rules, {new}):
            return t.isoformat(timespec="seconds"), f"at the run of job {job.name} at {t:%Y-%m-%d %H:%M} UTC"
        prev, t = t, t + timedelta(seconds=1)
    return None, f"not within the next {RUNS} runs of job {job.name}"


def replicated_by(dataset: str, jobs: list) -> list:
    """zfs and rsync jobs whose source is ``dataset`` or (recursive) one of its parents."""
    return [j for j in jobs if j.source == dataset or (j.recursive and dataset.startswith(j.source + "/"))]


def assess(prep: Planned, jobs: list[Replicate], now: datetime | None = None, budget: int | None = None) -> dict:
    """The plan's "snapshots", "replication" and "growth" parts (see `rebal plan --json`)."""
    now = now or datetime.now(timezone.utc)
    names_ = [j.name for j in jobs]
    ds_of = {t.dataset for t in prep.targets}
    snaps = []
    for (full, created, used), pinned in zip(prep.snapshots, prep.scan.pinned_by or [0] * len(prep.snapshots)):
        if not pinned:
            continue
        ds, _, name = full.partition("@")
        owner, tool = owner_of(name, names_)
        expires, when = None, "unknown: not made by rebal"
        if owner.startswith("rebal:"):
            job = next(j for j in jobs if j.name == owner[6:])
            mine = [s[0].partition("@")[2] for s in prep.snapshots if s[0].startswith(ds + "@")]
            expires, when = expiry(name, job, [m for m in mine if m.startswith(f"rebal-{job.name}-")], now)
        snaps.append({"name": full, "created": datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="seconds"),
                      "pinned_bytes": pinned, "used_bytes": used, "owner": owner, "tool": tool,
                      "expires": expires, "expires_when": when})
    rewritten = prep.plan.bytes
    physical = prep.method == "rewrite" and prep.physical
    repl = []
    seen = set()
    for ds in sorted(ds_of):
        for j in replicated_by(ds, jobs):
            if j.name in seen:
                continue
            seen.add(j.name)
            if j.mode == "rsync":
                grow, why = 0, "rsync compares size and mtime, which a rewrite keeps"
            elif physical:
                grow, why = 0, "zfs rewrite -P keeps logical birth times"
            else:
                grow, why = rewritten, ("a copy gives every block a new birth time" if prep.method == "copy"
                                        else "zfs rewrite without -P gives every block a new birth time")
            repl.append({"job": j.name, "mode": j.mode, "next_incremental_bytes": grow, "why": why})
    frac = prep.scan.pinned_bytes / prep.scan.bytes if prep.scan.bytes else 0.0
    growth = int(rewritten * frac)
    avail, reserve = prep.available, prep.reserve
    return {
        "snapshots": snaps,
        "replication": repl,
        "growth": {"bytes": growth, "available": avail, "reserve": reserve,
                   "fits_reserve": avail - growth >= reserve, "budget": budget,
                   "returns_when_gone": [s["name"] for s in snaps]},
    }
