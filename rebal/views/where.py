"""`rebal where` as text."""

from __future__ import annotations

from .. import fill
from ..units import human
from .text import table


def where_text(rep) -> str:
    out = [f"{', '.join(rep.paths)} (pool {rep.pool}): {rep.files} file(s), "
           f"{human(rep.measured_bytes)} measured from the block pointers of {rep.sampled_files} file(s)"]
    rows = [("VDEV", "BYTES", "SHARE", "95%", "")]
    for v in rep.vdevs:
        ci = f"+-{100 * v['ci95']:.1f}" if "ci95" in v else "exact"
        rows.append((v["name"], human(v["bytes"]), f"{100 * v['share']:.1f}%", ci, fill.bar(100 * v["share"])))
    out += table(rows, right={1, 2, 3})
    if rep.other_bytes:
        out.append(f"{human(rep.other_bytes)} on log, special or dedup vdevs (not counted)")
    out += [f"note: {n}" for n in rep.notes]
    out.append(f"({rep.seconds:.1f} s)")
    return "\n".join(out) + "\n"
