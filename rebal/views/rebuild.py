"""Text of `rebal rebuild`: where the procedure stands and what is the admin's to do next."""

from __future__ import annotations

from datetime import datetime, timezone

from ..recover.rebuild_record import Record
from ..units import human
from .text import lines

NEXT = {
    "covered": "the check did not finish: run rebal rebuild {pool} --job {job} again",
    "pointed": "the check did not finish: run rebal rebuild {pool} --job {job} again",
    "checked": "yours to run now, in this order (rebal destroys nothing):",
    "restoring": "the restore is under way or was cut: rebal rebuild {pool} --continue goes on with it",
    "restored": "rebal rebuild {pool} --continue sets keys and properties, then verifies",
    "configured": "rebal rebuild {pool} --continue verifies every file against the backup",
    "done": "done: rebal replicate {job} goes on incrementally from @{point}",
}


def rebuild_text(rec: Record) -> str:
    out = [f"rebuild of {rec.pool} from job {rec.job}: step {rec.step}"
           + (f", restore point @{rec.point}" if rec.point else "")]
    if rec.files:
        out.append(f"  {rec.files[0]} files, {human(rec.files[1])}, equal on the backup at @{rec.point}")
    for s in rec.steps:
        when = datetime.fromtimestamp(s["at"], timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
        out.append(f"  {when}  {s['step']:10}  {s['note']}")
    if rec.step == "checked":
        shift = f"ashift {rec.ashift}" if rec.ashift not in ("", "0") else "its ashift chosen by ZFS from the disks"
        out.append(f"the pool as it was ({shift}):")
        out += ["  " + ln for ln in rec.layout.splitlines() if ln.startswith("\t")]
    out.append(NEXT.get(rec.step, "").format(pool=rec.pool, job=rec.job, point=rec.point))
    if rec.step == "checked":
        out += [f"  {i}. {c}" for i, c in enumerate(rec.commands, 1)]
    out += [f"  note: {n}" for n in rec.notes]
    return lines(out)
