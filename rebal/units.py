"""Byte figures and times for people and from people."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .errors import UsageError

_SUFFIX = "KMGTPE"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)(?:i?B)?\s*$", re.IGNORECASE)


def human(n: int | float) -> str:
    """Bytes in powers of 1024, three significant digits, like zpool: 1.36G, 960M, 108K."""
    n = float(n)
    if abs(n) < 1024:
        return f"{n:.0f}B"
    for i, s in enumerate(_SUFFIX, 1):
        v = n / 1024**i
        if abs(v) < 1024 or s == "E":
            return f"{v:.2f}{s}" if v < 10 else f"{v:.1f}{s}" if v < 100 else f"{v:.0f}{s}"
    raise AssertionError("unreachable")


SIZE_HINT = "give a number with an optional K, M, G or T suffix, like 500G or 1.5M"


def size_problem(text: str) -> str | None:
    """None when ``text`` is a size `parse_size` reads (the one grammar of the command line and the
    config file), else what to give."""
    return None if _SIZE.match(text) else SIZE_HINT


def parse_size(text: str) -> int:
    """'10G', '512M', '1.5T', '200MiB', '4096' -> bytes (powers of 1024)."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"not a size: {text!r} ({SIZE_HINT})")
    exp = _SUFFIX.index(m.group(2).upper()) + 1 if m.group(2) else 0
    return int(float(m.group(1)) * 1024**exp)


def iso(ts: float) -> str:
    """Epoch seconds as UTC ISO 8601 to the second: 2026-11-26T06:15:45Z."""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
