"""`rebal refresh` as text: the plan, and a run's report."""

from __future__ import annotations

from ..units import human
from .text import table


def _props(by: dict) -> str:
    return ", ".join(f"{k} {human(v['bytes'] if isinstance(v, dict) else v)}" for k, v in by.items()) or "-"


def summary_text(s: dict) -> list[str]:
    out = [f"{', '.join(s['paths'])} (pool {s['pool']}): {s['files']} file(s), block pointers of "
           f"{s['measured_files']} read"]
    rows = [("DATASET", "DATA", "OLD", "BY PROPERTY (bytes in blocks written under another value)")]
    for d in s["datasets"]:
        old = human(d["old_bytes"]) + (f" +-{human(d['old_ci95'])}" if d.get("old_ci95") else "")
        rows.append((d["dataset"], human(d["bytes"]), old, _props(d["by_property"])))
    out += table(rows, right={1, 2})
    now = {d["dataset"]: d["properties"] for d in s["datasets"]}
    for ds, p in sorted(now.items()):
        out.append(f"  {ds} now: " + ", ".join(f"{k}={v}" for k, v in sorted(p.items())))
    if s["dirs"]:
        out.append("directories with the most old data (measured files):")
        out += [f"  {d['path']}: {d['files']} file(s), {_props(d['by_property'])}" for d in s["dirs"]]
    m = s["methods"]
    if m.get("rewrite") or m.get("copy"):
        out.append(f"a refresh rewrites {human(m.get('rewrite', 0))} in place where the pool has zfs rewrite "
                   f"(else by copy) and copies {human(m.get('copy', 0))} (a new block size takes a copy)")
    for ds, r in sorted(s.get("recordsize", {}).items()):
        sizes = ", ".join(f"{human(int(k))} x{v}" for k, v in r["block_sizes_now"].items())
        out.append(f"{ds}: {r['files_measured']} measured file(s) get {human(r['recordsize'])} blocks (now {sizes})")
    out += [f"note: {n}" for n in s.get("notes", [])]
    return out


def left_text(left: list[dict], planned: bool) -> list[str]:
    """The old files a refresh leaves as they are, and why."""
    if not left:
        return []
    verb = "a refresh leaves" if planned else "left"
    out = [f"{verb} {len(left)} old file(s) as they are ({human(sum(x['old_bytes'] for x in left))}): {left[0]['why']}"]
    out += [f"  {x['path']} ({x['links']} names, {human(x['old_bytes'])} old)" for x in left[:20]]
    if len(left) > 20:
        out.append(f"  ... and {len(left) - 20} more (--json lists all)")
    return out


def plan_text(p: dict) -> str:
    out = summary_text(p)
    c = p.get("compression")
    if c and c.get("predicted"):
        out.append(f"predicted: a refresh saves {human(c['saved_bytes'])} ({100 * c['saved_fraction']:.1f}% of "
                   f"{human(c['old_bytes'])} in old blocks) with {c['algorithm']} ({c['how']})")
    elif c:
        out.append(f"saving not predicted: {c['why']}")
    out += left_text(p.get("left", []), planned=True)
    out.append(f"({p['seconds']:.1f} s; changes nothing)")
    return "\n".join(out) + "\n"


def report_text(r: dict) -> str:
    out = summary_text(r["before"])
    for p in r["passes"]:
        if r.get("dry_run"):
            out.append(f"would rewrite {p['files']} file(s) by {p['method']} ({p['why']})")
            out += [f"  warning: {w}" for w in p.get("warnings", [])] + [f"  note: {n}" for n in p.get("notes", [])]
        else:
            run = f" (run {p['run_id']})" if p.get("run_id") is not None else f" ({p.get('reason')})"
            out.append(f"{p['method']}: {p['rewritten_files']} file(s), {human(p['rewritten_bytes'])} rewritten "
                       f"({p['why']}): {p['outcome']}{run}")
    for ds, u in sorted(r.get("usage", {}).items()):
        b, a = u["before"], u["after"]
        out.append(f"{ds}: used {human(b['used'])} -> {human(a['used'])}, compressratio {b['compressratio']} -> "
                   f"{a['compressratio']}")
    for p in r["passes"]:
        for why, n in (p.get("skipped") or {}).items():
            out.append(f"  {p['method']}: {n} file(s) skipped: {why}")
    out += left_text(r.get("left", []), planned=bool(r.get("dry_run")))
    if "old_bytes_after" in r:
        out.append(f"still under old properties: {human(r['old_bytes_after'])} of {human(r['old_bytes_before'])} "
                   f"({100 * r['old_share_after']:.1f}%)")
    out.append(f"{r['outcome']}: {r.get('reason') or ''}" + (" (dry run: nothing was changed)" if r.get("dry_run") else ""))
    return "\n".join(out) + "\n"
