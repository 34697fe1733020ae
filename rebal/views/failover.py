"""Text of `rebal failover` and `rebal failback`: what was done, what is kept, what comes next."""

from __future__ import annotations

from ..recover.failback import FailbackReport
from ..recover.failover import FailoverReport
from ..units import human
from .text import lines

_KIND = {"incremental": "the backup's changes sent", "full": "made on the backup: sent whole",
         "resumed": "a cut send resumed", "present": "back already (left as it is)", "refused": "NOT back"}


def failover_text(rep: FailoverReport, dry_run: bool) -> str:
    if dry_run:
        return lines([f"dry run: would fail job {rep.job} over to {rep.target} on this host"]
                     + [f"  would run: {s}" for s in rep.planned])
    head = (f"job {rep.job} was failed over already (since {rep.since}); every step is in place"
            if rep.already else f"job {rep.job} failed over: {rep.target} is writable here since {rep.since}")
    out = [head]
    for d in rep.datasets:
        out.append(f"  {d['name']:40}  {d['mountpoint'] if d['mounted'] else 'not mounted (' + d['mountpoint'] + ')'}")
    out += [f"  note: {n}" for n in rep.notes]
    out.append(f"when the file server is back: rebal failback {rep.job} --dry-run, then without --dry-run")
    return lines(out)


def failback_text(rep: FailbackReport, dry_run: bool) -> str:
    if dry_run:
        out = [f"dry run: would fail job {rep.job} back to the file server at @{rep.snapshot}"]
        for d in rep.datasets:
            if d.kind == "refused" or d.error:
                out.append(f"  {d.server}: refused: {d.error}")
            elif d.diverged or d.diverged_snaps:
                keep = f"kept in {d.kept}" if d.kept else "DISCARDED (--discard-diverged)"
                out.append(f"  {d.server}: the file server wrote {human(d.diverged)} and {len(d.diverged_snaps)} "
                           f"snapshot(s) after @{d.base}: {keep}")
        return lines(out + [f"  would run: {s}" for s in rep.planned])
    out = [f"job {rep.job} failed back at @{rep.snapshot} ({human(sum(d.bytes for d in rep.datasets))} sent)"
           if rep.done else f"job {rep.job}: failback not finished"]
    for d in rep.datasets:
        what = _KIND.get(d.kind, d.kind)
        sent = f" ({human(d.bytes)})" if d.bytes else ""
        out.append(f"  {d.server:40}  {what}{sent}{f': {d.error}' if d.error else ''}")
        if d.kept:
            out.append(f"    kept: what the file server wrote after @{d.base} ({human(d.diverged)}, "
                       f"{len(d.diverged_snaps)} snapshot(s)) is in {d.kept}, read-only; rebal never destroys it")
        elif d.diverged or d.diverged_snaps:
            out.append(f"    discarded: {human(d.diverged)} the file server wrote after @{d.base} (--discard-diverged)")
    out += [f"  note: {n}" for n in rep.notes]
    if rep.done:
        out.append(f"the backup is read-only and unmounted again; the next `rebal replicate {rep.job}` is incremental "
                   f"from @{rep.snapshot}")
    return lines(out)


def status_text(st: dict) -> str:
    if not st["failed_over"] and not st.get("failback"):
        return lines([f"job {st['job']}: not failed over; the replication goes its way"])
    out = [f"job {st['job']}: " + (f"failed over since {st['since'] or '?'}, {st['target']} is written on this host"
                                   if st["failed_over"] else "not failed over")]
    back = st.get("failback") or {}
    if back:
        out.append(f"  failback at @{back.get('snapshot')}: " + ("done" if back.get("done") else
                                                              "begun, not finished: run rebal failback again"))
    return lines(out)
