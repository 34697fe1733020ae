"""Per-vdev fill: spread, JSON shape, history series. Pure functions of the models."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

from .errors import UsageError
from .state import SampleRow
from .units import iso
from .zfs.model import Pool, Vdev


def vdev_json(v: Vdev) -> dict:
    return {
        "name": v.name,
        "type": v.type,
        "class": v.vclass,
        "size": v.size,
        "alloc": v.alloc,
        "free": v.free,
        "cap": round(v.cap, 2),
        "state": v.state,
        "devices": list(v.devices),
        "exact": v.exact,
    }


def pool_json(p: Pool, target_spread: float) -> dict:
    return {
        "name": p.name,
        "health": p.health,
        "size": p.size,
        "alloc": p.alloc,
        "free": p.free,
        "cap": round(p.cap, 2),
        "spread": round(p.spread, 2),
        "target_spread": target_spread,
        "over_target": p.spread > target_spread,
        "source": p.source,
        "vdevs": [vdev_json(v) for v in p.data_vdevs],
        "other_vdevs": [vdev_json(v) for v in p.other_vdevs],
    }


def short_names(full: list[str]) -> dict[str, str]:
    """Display names: a file vdev's base name when that is still unique, else the full name."""
    base = {n: n.rsplit("/", 1)[-1] if n.startswith("/") else n for n in full}
    unique = len(set(base.values())) == len(base)
    return base if unique else {n: n for n in full}


BLOCKS = " ▏▎▍▌▋▊▉█"
SPARK = "▁▂▃▄▅▆▇█"


def bar(cap: float, width: int = 20) -> str:
    """A bar of ``width`` cells filled to ``cap`` percent, with eighth-cell resolution."""
    cap = min(max(cap, 0.0), 100.0)
    eighths = round(cap / 100 * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + (BLOCKS[part] if part else "")
    return s.ljust(width, "·")


def sparkline(values: list[float | None], width: int = 48, lo: float = 0.0, hi: float = 100.0) -> str:
    """CAP values as one line of block characters, averaged into at most ``width`` cells; None (a
    sample from before the vdev was added) is a blank, so series of one pool line up in time."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        cells: list[float | None] = []
        for i in range(width):
            chunk = [v for v in values[int(i * step): max(int((i + 1) * step), int(i * step) + 1)] if v is not None]
            cells.append(sum(chunk) / len(chunk) if chunk else None)
        values = cells
    span = (hi - lo) or 1.0
    return "".join(" " if v is None else SPARK[min(len(SPARK) - 1, max(0, int((v - lo) / span * len(SPARK))))]
                   for v in values)


_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float | None = None) -> float:
    """'7d', '12h', '30m', '2w' ago, or an ISO date/time (UTC when no zone is given) -> epoch."""
    now = time.time() if now is None else now
    m = _AGO.match(text.strip())
    if m:
        return now - float(m.group(1)) * _SECONDS[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since {text!r}: give an age like 7d, 12h, 30m, or a date like 2026-11-01") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def history_json(pool: str, rows: list[SampleRow]) -> dict:
    return {
        "pool": pool,
        "samples": [
            {
                "ts": iso(r.ts),
                "spread": round(r.spread, 2),
                "vdevs": {
                    name: {"size": size, "alloc": alloc, "cap": round(100.0 * alloc / size, 2) if size else 0.0}
                    for name, (size, alloc) in r.vdevs.items()
                },
            }
            for r in rows
        ],
    }


def history_series(rows: list[SampleRow]) -> dict[str, list[float | None]]:
    """vdev name -> CAP per sample, one entry for every sample (None where the vdev was not there
    yet, or no longer), so that every vdev's series runs on the same time axis."""
    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r.vdevs))
    series: dict[str, list[float | None]] = {n: [] for n in names}
    for r in rows:
        for name in names:
            if name in r.vdevs:
                size, alloc = r.vdevs[name]
                series[name].append(100.0 * alloc / size if size else 0.0)
            else:
                series[name].append(None)
    return series
