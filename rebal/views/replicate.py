"""Replication, restore points, restore and verify as text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..outcome import Outcome
from ..units import human
from .text import lines

if TYPE_CHECKING:
    from ..recover.heal import HealReport
    from ..recover.restore import RestorePoint, RestoreReport
    from ..recover.restore_tree import TreeReport
    from ..recover.verify import VerifyReport
    from ..replicate.pairing import Pairing


def replication_text(outcome: str, d: dict) -> str:
    if d.get("dry_run"):
        where = " to a target on this host" if d.get("local_target") else ""
        out = [f"dry run of job {d['job']} ({d['mode']}{where}): nothing was changed"]
        out += [f"  in:  {ds['source']} -> {ds['target']} ({ds['kind'] or 'planned'})" for ds in d.get("datasets", [])]
        out += [f"  out: {x}" for x in d.get("excluded", [])]
        out += [f"  {k}: {' '.join(v)}" for k, v in (d.get("hooks") or {}).items()]
        out += [f"  would run: {line}" for line in d.get("planned", [])]
        out += [f"  note: {n}" for n in dict.fromkeys(d.get("notes", []))]
        return lines(out)
    out = [f"{outcome}: job {d['job']} ({d['mode']}), snapshot {d.get('snapshot') or '-'}, "
           f"{human(d.get('bytes') or 0)} sent in {d.get('seconds', 0):.1f} s (run {d.get('run_id')})"]
    same = [ds for ds in d.get("datasets", []) if ds["kind"] == "unchanged"]
    if same:
        out.append(f"  {len(same)} dataset(s) unchanged (nothing written since their last run): not snapshot, not sent")
    for ds in d.get("datasets", []):
        if ds["kind"] == "unchanged":
            continue
        if ds["kind"] == "resumed":
            of = f" of the {human(ds['expected'])} left" if ds.get("expected") else ""
            out.append(f"  {ds['source']} -> {ds['target']}: resumed {ds.get('base') or ''}, sent "
                       f"{human(ds['bytes'])}{of}" + (f"  {ds['error']}" if ds.get("error") else ""))
            continue
        if ds["kind"] == "renamed":
            out.append(f"  {ds['source']} -> {ds['target']}: not sent (renamed; see the warning)")
            continue
        sep = "#" if ds.get("base_bookmark") else "@"
        base = f" from {sep}{ds['base']}" if ds.get("base") and ds["kind"] != "full" else ""
        out.append(f"  {ds['source']} -> {ds['target']}: {ds['kind']}{base}, {human(ds['bytes'])}"
                   + (f"  {ds['error']}" if ds.get("error") else ""))
    for k, label in (("resumed", "resumed"), ("aborted_tokens", "aborted interrupted receive"),
                     ("pruned_source", "pruned on the source"), ("pruned_target", "pruned on the backup host"),
                     ("pruned_bookmarks", "old cursor bookmarks destroyed")):
        if d.get(k):
            out.append(f"  {label}: {', '.join(d[k])}")
    out += [f"  warning: {w}" for w in d.get("warnings", [])]
    out += [f"  note: {n}" for n in dict.fromkeys(d.get("notes", []))]
    if d.get("error") and not d.get("datasets"):
        out.append(f"  {d['error']}")
    return lines(out)


def backups_text(job: str, mode: str, host: str, where: str, pts: list[RestorePoint], newest: dict | None = None) -> str:
    out = [f"job {job} ({mode}): {len(pts)} restore point(s) on {host}:{where}"]
    for p in pts:
        d = p.as_dict()
        size = f"{human(p.referenced)} referenced" if p.referenced is not None else "the target directory as it is now"
        out.append(f"  {p.name:40}  {d['created'] or '':20}  {size}")
    if newest:  # a tree: each dataset's own newest backup (what restore --all --at latest brings back)
        root = newest.get(where)
        other = {ds: n for ds, n in newest.items() if n != root}
        out.append(f"each dataset's newest backup (restore --all --at latest): @{root} for "
                   f"{len(newest) - len(other)} of {len(newest)}" + (", and:" if other else ""))
        out += [f"  {ds:40}  @{n}" for ds, n in other.items()]
    return lines(out)


def restore_text(job: str, rep: RestoreReport | TreeReport, dry_run: bool) -> str:
    if dry_run:
        return lines([f"dry run: would restore @{rep.point} to {rep.to}"]
                     + [f"  would run: {line}" for line in rep.planned])
    tree = getattr(rep, "datasets", None) is not None
    head = (f"restored job {job} to {rep.to}, each dataset at its own newest backup at or before @{rep.point}"
            if tree else f"restored @{rep.point} of job {job} to {rep.to}")
    out = [f"{head} ({human(rep.bytes)})"]
    for d in getattr(rep, "datasets", []):  # a whole tree: one line a dataset, with the snapshot it came from
        what = {"full": "received", "resumed": "resumed and received", "present": "already restored (left as it is)",
                "missing": "not restored"}.get(d.kind, d.kind)
        at = f" from @{d.point}" if d.point else ""
        out.append(f"  {d.target:40}  {what}{at}{f' ({human(d.bytes)})' if d.bytes else ''}{f': {d.error}' if d.error else ''}")
    return lines(out + [f"  WARNING: {w}" for w in getattr(rep, "warnings", [])] + [f"  note: {n}" for n in rep.notes])


def verify_text(job: str, rep: VerifyReport, level_name: str) -> str:
    out = [f"{level_name}: job {job}, snapshot @{rep.snapshot or '-'}, files "
           f"{rep.files[0] if rep.files else '-'} / {rep.files[1] if rep.files else '-'} (source / backup), "
           f"{len(rep.sample)} hashed (seed {rep.seed})"]
    out += [f.line() for f in rep.findings]
    out += [f"  note: {note}" for note in rep.notes]
    return lines(out)


def pairing_text(p: Pairing) -> str:
    """`rebal keys`: what was done, and what is left for the admin, in the order to do it."""
    if p.host is None:
        return f"job {p.job}: " + "; ".join(p.notes) + "\n"
    out = [f"1. the job's key: {p.key} ({'made now' if p.key_made else 'exists'})"]
    if p.pinned:
        out.append(f"2. {p.host}'s host key: {'pinned now' if p.pinned_now else 'pinned'}")
    else:
        out.append(f"2. {p.host}'s host key is NOT pinned. It offers:")
        out += [f"     {fp}" for fp in p.fingerprints]
        out.append(f"   compare on {p.host} itself: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub")
        out.append(f"   then: rebal keys {p.job} --pin SHA256:...   (the one that matches)")
    out.append(f"3. for the authorized_keys of {p.where}:")
    out.append(f"     {p.line}")
    if p.installed is not None:
        out.append(f"   {'added to' if p.installed else 'already in'} {p.installed_to}")
    else:
        out.append(f"   (rebal keys {p.job} --install adds it over your own ssh login)")
    if p.dry_run is not None:
        if not p.dry_run.startswith(Outcome.FAILED):
            nxt = (f"nothing: the job has run before (rebal replicate {p.job} runs it now)" if p.replicated
                   else f"rebal replicate {p.job} (the first run)")
        elif p.installed is not None and "refused" in p.dry_run:
            nxt = (f"the line is in {p.installed_to}, yet the key is refused: check that sshd there reads that "
                   "file (AuthorizedKeysFile in sshd_config) and lets the user in (PermitRootLogin "
                   f"prohibit-password for root), then rebal keys {p.job} again")
        else:
            nxt = f"add the line of step 3 there (or --install), then rebal keys {p.job} again"
        out.append(f"4. a dry run of the job: {p.dry_run}")
        out.append(f"   next: {nxt}")
    if p.failover:
        out.append(f"for {p.host}'s own config, to serve from it when this host is down (rebal failover {p.job} there):")
        out += [f"     {line}" for line in p.failover.splitlines()]
    out += [f"note: {n}" for n in p.notes]
    return "\n".join(out) + "\n"


def heal_text(rep: HealReport, dry_run: bool) -> str:
    """`rebal heal`: per damaged file what became of it, then what was run."""
    if not rep.before:
        return f"{rep.pool}: no permanent errors: nothing to heal\n"
    verb = "would heal" if dry_run else "healed"
    done = sum(1 for f in rep.files if f.state in ("healed", "would heal"))
    out = [f"{rep.pool}: {len(rep.files)} damaged, {done} {verb} from the backup"
           + ("" if dry_run else f" ({rep.scrub or 'no scrub'} after; {len(rep.after)} still listed)")]
    for f in rep.files:
        what = f.state + (f" from @{f.source}" if f.source and f.state != "lost" else "")
        if f.age_hours is not None:
            what += f" ({f.age_hours:g} h old)"
        if f.restored_to:
            what += f", its backup copy put at {f.restored_to}"
        out.append(f"  {f.entry}: {what}" + (f"; {f.note}" if f.note else ""))
    out += [f"  would run: {p}" for p in rep.planned]
    out += [f"  note: {n}" for n in rep.notes]
    return lines(out)
