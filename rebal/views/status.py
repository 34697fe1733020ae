"""`rebal status` and `rebal history` as text. Plain text, no rich: status is the command run most,
by people and by timers, and its start-up time counts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import fill
from ..units import human, iso
from .text import age, lines, table

if TYPE_CHECKING:
    from ..state import SampleRow
    from ..zfs.model import Pool


def status_text(pools: list[Pool], target: float, replication: list[dict]) -> str:
    out: list[str] = []
    if not pools:
        out.append("no pools imported")
    for p in pools:
        verdict = f"over the target {target:g}" if p.spread > target else f"within the target {target:g}"
        out.append(f"{p.name}  {p.health}  size {human(p.size)}  alloc {human(p.alloc)}  free {human(p.free)}  "
                   f"CAP {p.cap:.0f}%")
        out.append(f"spread {p.spread:.1f} points ({verdict})")
        rows = [("VDEV", "TYPE", "SIZE", "ALLOC", "FREE", "CAP", "")]  # vdevs named as ZFS and --json name them
        for v in p.data_vdevs:
            rows.append((v.name, v.type, human(v.size), human(v.alloc), human(v.free), f"{v.cap:.1f}%",
                         fill.bar(v.cap)))
        for v in p.other_vdevs:
            rows.append((v.name, v.vclass, "", "", "", "", "(not counted)"))
        out += table(rows, right={2, 3, 4, 5})
        if any(not v.exact for v in p.data_vdevs):
            out.append("(figures from 'zpool iostat -v' are rounded to 3 digits)")
        out.append("")
    out += replication_lines(replication)
    return lines(out)


def replication_lines(replication: list[dict]) -> list[str]:
    out = []
    for r in replication:
        if r["last_success"] is None:
            out.append(f"replication {r['job']} ({r['mode']}): never succeeded")
        else:
            out.append(f"replication {r['job']} ({r['mode']}): last success {iso(r['last_success'])}, "
                       f"{age(r['age_seconds'])} ago, snapshot {r['snapshot'] or '-'}")
    return out


def history_text(pool: str, rows: list[SampleRow]) -> str:
    if not rows:
        return lines(f"no samples of pool {pool} yet (run 'rebal status {pool}', or the daemon)")
    series = fill.history_series(rows)
    short = fill.short_names(list(series))
    out = [f"{pool}: {len(rows)} samples, {iso(rows[0].ts)} .. {iso(rows[-1].ts)}"]
    chart = [("VDEV", "CAP over time (0-100%)", "NOW")]
    for name, caps in series.items():
        now = caps[-1]
        chart.append((short[name], fill.sparkline(caps), "-" if now is None else f"{now:.1f}%"))
    out += table(chart, right={2})
    out.append("")
    head = ("TIME (UTC)", "SPREAD") + tuple(short[n] for n in series)
    body = [head]
    shown = rows if len(rows) <= 20 else rows[:: max(1, len(rows) // 20)][:19] + [rows[-1]]
    for r in shown:
        cells = []
        for name in series:
            size, alloc = r.vdevs.get(name, (0, 0))
            cells.append(f"{100.0 * alloc / size:.1f}%" if size else "-")
        body.append((iso(r.ts), f"{r.spread:.1f}", *cells))
    out += table(body, right=set(range(1, len(head))))
    return lines(out)
