"""Replication, restore points, restore and verify as text."""

from __future__ import annotations

from ..units import human
from .text import lines


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


def backups_text(job: str, mode: str, host: str, where: str, pts) -> str:
    out = [f"job {job} ({mode}): {len(pts)} restore point(s) on {host}:{where}"]
    for p in pts:
        d = p.as_dict()
        size = f"{human(p.referenced)} referenced" if p.referenced is not None else "the target directory as it is now"
        out.append(f"  {p.name:40}  {d['created'] or '':20}  {size}")
    return lines(out)


def restore_text(job: str, rep, dry_run: bool) -> str:
    if dry_run:
        return lines([f"dry run: would restore @{rep.point} to {rep.to}"]
                     + [f"  would run: {line}" for line in rep.planned])
    return lines([f"restored @{rep.point} of job {job} to {rep.to} ({human(rep.bytes)})"]
                 + [f"  note: {n}" for n in rep.notes])


def verify_text(job: str, rep, level_name: str) -> str:
    out = [f"{level_name}: job {job}, snapshot @{rep.snapshot or '-'}, files "
           f"{rep.files[0] if rep.files else '-'} / {rep.files[1] if rep.files else '-'} (source / backup), "
           f"{len(rep.sample)} hashed (seed {rep.seed})"]
    out += [f.line() for f in rep.findings]
    out += [f"  note: {note}" for note in rep.notes]
    return lines(out)
