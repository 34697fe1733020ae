"""`rebal plan --to special` and `rebal rebalance --to special` as text."""

from __future__ import annotations

from ..units import human
from .text import table


def summary_lines(s: dict) -> list[str]:
    sp = s["special"]
    out = [f"{', '.join(s['paths'])} (pool {s['pool']}): {s['files']} file(s), block pointers of "
           f"{s['measured_files']} read",
           f"special class ({', '.join(sp['vdevs'])}): {human(sp['alloc'])} of {human(sp['size'])} allocated; it takes "
           f"{human(sp['room_metadata'])} more metadata, {human(sp['room_small'])} more small blocks (up to "
           f"{100 - sp['reserve_pct']}% full)"]
    rows = [("DATASET", "SPECIAL_SMALL_BLOCKS", "METADATA", "SMALL BLOCKS", "ON SPECIAL")]
    for d in s["datasets"]:
        rows.append((d["dataset"], human(d["special_small_blocks"]) if d["special_small_blocks"] else "0 (metadata only)",
                     human(d["metadata_bytes"]), human(d["small_bytes"]), human(d["on_special_bytes"])))
    out.append("on the normal vdevs, bound for the special class (metadata: indirect blocks; small blocks: data "
               "blocks at or under special_small_blocks after compression):")
    out += table(rows, right={2, 3, 4})
    if s["dirs"]:
        out.append("directories holding the most of it:")
        out += [f"  {d['path']}: {human(d['bytes'])}" for d in s["dirs"]]
    c, p = s["chosen"], s["predicted"]
    if c["files"]:
        per = c["bytes"] / max(1, c["metadata_bytes"] + c["small_bytes"])
        out.append(f"to rewrite: {c['files']} file(s), {human(c['bytes'])}, holding {human(c['metadata_bytes'])} of "
                   f"metadata and {human(c['small_bytes'])} of small blocks ({100 * c['share_of_bound']:.0f}% of "
                   f"{human(s['bound_bytes'])}; {per:.1f} bytes rewritten per byte moved)")
        out.append(f"predicted: {human(p['metadata_moved'])} of metadata and {human(p['small_moved'])} of small "
                   "blocks move to the special class")
    else:
        out.append("nothing worth a rewrite: no file holds metadata or small blocks on the normal vdevs"
                   + (" (--all rewrites every file that holds any)" if s["bound_bytes"] else ""))
    out += [f"note: {n}" for n in s.get("notes", [])]
    out += [f"warning: {w}" for w in s.get("warnings", [])]
    return out


def plan_text(s: dict) -> str:
    return "\n".join(summary_lines(s) + [f"({s['seconds']:.1f} s; changes nothing)"]) + "\n"


def report_text(r: dict) -> str:
    out = summary_lines(r["before"])
    for p in r.get("passes", []):
        if r.get("dry_run"):
            out.append(f"would rewrite {p['files']} file(s) by {p['method']} ({p['why']})")
        else:
            out.append(f"run {p.get('run_id')}: {p.get('outcome')}, {p.get('rewritten_files', 0)} file(s), "
                       f"{human(p.get('rewritten_bytes', 0))} rewritten by {p['method']}")
    if r.get("left"):
        out.append(f"left {len(r['left'])} hardlinked file(s) as they are (a copy of one name would break the link; "
                   "[rebalance] hardlinks = true copies whole link groups)")
    m = r.get("moved")
    if m:
        out.append(f"left the normal vdevs: {human(m['left_normal_bytes'])} of {human(m['bound_before'])}; "
                   f"{human(m['bound_after'])} still there; special class {human(m['special_alloc_before'])} -> "
                   f"{human(m['special_alloc_after'])}")
    out.append(f"{r['outcome']}: {r['reason']}")
    return "\n".join(out) + "\n"
