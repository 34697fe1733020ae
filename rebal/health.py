"""Health findings from `zpool status`, fill, and the replication records. Pure: data in, findings out.

Levels follow the Nagios convention: 0 OK, 1 WARNING, 2 CRITICAL; a check's exit code is the
highest level found.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

from .zfs.model import Pool, PoolStatus, StatusVdev

OK, WARNING, CRITICAL = 0, 1, 2
LEVEL_NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL"}

GOOD_STATES = {"ONLINE", "AVAIL", "INUSE"}
CRIT_POOL = {"DEGRADED", "FAULTED", "UNAVAIL", "SUSPENDED", "REMOVED", "OFFLINE"}


@dataclass(frozen=True, slots=True)
class Finding:
    level: int
    subject: str  # pool name or job:<name>
    message: str

    def line(self) -> str:
        return f"{LEVEL_NAMES[self.level]} {self.subject}: {self.message}"

    def as_dict(self) -> dict:
        return {"level": LEVEL_NAMES[self.level], "subject": self.subject, "message": self.message}


_DATE = re.compile(r"on (\w{3} \w{3}\s+\d{1,2}\s+\d{1,2}:\d{2}:\d{2} \d{4})")


def scrub_time(scan: str) -> float | None:
    """When the last scrub ended, from the scan/scrub line (OpenZFS and zfs-fuse wordings)."""
    if "scrub" not in scan or "in progress" in scan or "none requested" in scan:
        return None
    m = _DATE.search(scan)
    if not m:
        return None
    try:
        return datetime.strptime(re.sub(r"\s+", " ", m.group(1)), "%a %b %d %H:%M:%S %Y").timestamp()
    except ValueError:
        return None


def _walk(v: StatusVdev, parent: str | None = None):
    yield v, parent
    for c in v.children:
        yield from _walk(c, v.name)


def pool_findings(st: PoolStatus, pool: Pool | None, *, cap_warning: float, cap_critical: float,
                  target_spread: float, scrub_max_age_days: float, now: float | None = None,
                  created: float | None = None) -> list[Finding]:
    """``created``: when the pool was made (its root dataset's creation): a pool younger than
    ``scrub_max_age_days`` that was never scrubbed is not overdue yet."""
    now = time.time() if now is None else now
    out: list[Finding] = []
    name = st.name
    if st.state not in ("ONLINE",):
        out.append(Finding(CRITICAL if st.state in CRIT_POOL else WARNING, name, f"pool is {st.state}"))
    for top in st.vdevs:
        for v, parent in _walk(top):
            where = f" ({parent})" if parent else ""
            if v.state and v.state not in GOOD_STATES:
                level = CRITICAL if v.section not in ("spare", "cache") else WARNING
                out.append(Finding(level, name, f"device {v.name}{where} is {v.state}"
                                   + (f" {v.note}" if v.note else "")))
            if v.read or v.write or v.cksum:
                out.append(Finding(WARNING, name, f"device {v.name}{where} has errors: read {v.read}, "
                                   f"write {v.write}, checksum {v.cksum}"))
    if st.errors and "no known data errors" not in st.errors.lower():
        out.append(Finding(CRITICAL, name, f"data errors: {st.errors.splitlines()[0]} (zpool status -v {name} lists "
                           f"the files; rebal heal {name} repairs those a replicated snapshot holds)"))
    scan = st.scan
    if "resilver in progress" in scan:
        out.append(Finding(WARNING, name, "resilver in progress"))
    if not scan or "none requested" in scan:
        if created is None or now - created > scrub_max_age_days * 86400:
            out.append(Finding(WARNING, name, "never scrubbed (rebal scrub POOL)"))
    elif "scrub" in scan and "in progress" not in scan:
        m = re.search(r"(\d+) errors", scan)
        if m and int(m.group(1)) > 0:
            out.append(Finding(CRITICAL, name, f"the last scrub found {m.group(1)} errors"))
        r = re.search(r"repaired (\S+)", scan)
        if r and r.group(1) not in ("0", "0B", "0K"):
            out.append(Finding(WARNING, name, f"the last scrub repaired {r.group(1)}: a device returned bad data"))
        t = scrub_time(scan)
        if t is not None and now - t > scrub_max_age_days * 86400:
            out.append(Finding(WARNING, name, f"last scrub {(now - t) / 86400:.0f} days ago "
                               f"(more than {scrub_max_age_days:g})"))
    if pool is not None:
        if pool.cap >= cap_critical:
            out.append(Finding(CRITICAL, name, f"pool is {pool.cap:.0f}% full (critical at {cap_critical:g}%)"))
        elif pool.cap >= cap_warning:
            out.append(Finding(WARNING, name, f"pool is {pool.cap:.0f}% full (warning at {cap_warning:g}%)"))
        if pool.spread > target_spread:
            out.append(Finding(WARNING, name, f"vdev fill spread is {pool.spread:.1f} points "
                               f"(target {target_spread:g}): rebal rebalance would even it"))
    return out


def sector_findings(pool: str, found: list) -> list[Finding]:
    """``found``: sectors.SectorMismatch of the pool's vdevs."""
    return [Finding(WARNING, pool, f"vdev {m.vdev} ({m.type}) has ashift {m.ashift} ({1 << m.ashift} B sectors) on disks "
                    f"of {m.physical} B physical sectors ({', '.join(m.disks[:2])}): every smaller write is a "
                    "read-modify-write inside the disk (slow; a torn write can damage the sector's neighbours). "
                    f"Only a rebuild changes it: rebal rebuild {pool} --job JOB") for m in found]


def replication_findings(last: list[dict], max_age_hours: float) -> list[Finding]:
    out = []
    for r in last:
        subject = f"job:{r['job']}"
        f = r.get("last_failure")
        if f:
            why = " ".join(str(f["error"] or f["outcome"]).split())
            out.append(Finding(WARNING, subject, f"the last run {f['outcome']} (run {f['run']}): "
                               f"{why[:300]}{'...' if len(why) > 300 else ''} (rebal runs --job {r['job']})"))
        if r["last_success"] is None:
            out.append(Finding(WARNING, subject, "replication never succeeded"))
        elif r["age_seconds"] > max_age_hours * 3600:
            out.append(Finding(WARNING, subject, f"last successful replication {r['age_seconds'] / 3600:.1f} h ago "
                               f"(more than {max_age_hours:g} h)"))
    return out


def snapshot_age_findings(jobs: list[dict], now: float) -> list[Finding]:
    """Per job (dicts with job, max_age_hours, datasets: dataset -> (snapshot, taken) or None for one
    never replicated), as sanoid's --monitor-snapshots: every dataset whose newest snapshot on the
    target is too old, and every dataset never replicated, named (the first ten, then a count)."""
    out = []
    for j in jobs:
        limit = j["max_age_hours"] * 3600
        never = sorted(d for d, p in j["datasets"].items() if p is None)
        old = sorted((d, p) for d, p in j["datasets"].items() if p is not None and now - p[1] > limit)
        subject = f"job:{j['job']}"
        if never:
            out.append(Finding(WARNING, subject, f"{len(never)} dataset(s) never replicated: {', '.join(never[:10])}"
                               + (f" and {len(never) - 10} more" if len(never) > 10 else "")))
        if old:
            named = ", ".join(f"{d} (@{p[0]}, {(now - p[1]) / 3600:.0f} h)" for d, p in old[:10])
            out.append(Finding(WARNING, subject, f"{len(old)} dataset(s) whose newest snapshot on the target is older "
                               f"than {j['max_age_hours']:g} h: {named}" + (f" and {len(old) - 10} more" if len(old) > 10 else "")))
    return out


def overall(findings: list[Finding]) -> int:
    return max((f.level for f in findings), default=OK)
