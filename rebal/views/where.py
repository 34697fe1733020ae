"""`rebal where` as text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import fill
from ..units import human
from .text import table

if TYPE_CHECKING:
    from ..readspeed import ReadResult
    from ..where import WhereReport


def where_text(rep: WhereReport) -> str:
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


def read_text(res: ReadResult) -> str:
    d = res.as_dict()
    out = [f"{', '.join(res.paths)} (pool {res.pool}): {res.files_read} file(s), {human(res.bytes_read)} read in "
           f"{res.seconds:.1f} s ({human(res.throughput)}/s); {human(res.disk_bytes)} of it from the data vdevs "
           f"({100 * d['from_disk']:.0f}%)"]
    rows = [("VDEV", "READ", "SHARE", "OPS", "SHARE", "")]
    for v in res.vdevs:
        rows.append((v["name"], human(v["bytes"]), f"{100 * v['share_bytes']:.1f}%", str(v["ops"]),
                     f"{100 * v['share_ops']:.1f}%", fill.bar(100 * v["share_bytes"])))
    out += table(rows, right={1, 2, 3, 4})
    out += [f"note: {n}" for n in res.notes]
    return "\n".join(out) + "\n"
