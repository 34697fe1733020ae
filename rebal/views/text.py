"""Small text helpers shared by the views: aligned columns, ages, sizes."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def table(rows: Sequence[Sequence[str]], right: Collection[int] = frozenset(), gap: str = "  ") -> list[str]:
    """Rows of cells as aligned lines: the first row is the header; columns in ``right`` are
    right-aligned; trailing spaces are cut."""
    if not rows:
        return []
    n = max(len(r) for r in rows)
    full = [tuple(r) + ("",) * (n - len(r)) for r in rows]
    widths = [max(len(r[i]) for r in full) for i in range(n)]
    out = []
    for r in full:
        cells = [r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i]) for i in range(n)]
        out.append(gap.join(cells).rstrip())
    return out


def age(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f} {unit}"
    return f"{seconds:.0f} s"


def lines(*parts: list[str] | str) -> str:
    """Join lines (and lists of lines) into text ending in a newline."""
    out: list[str] = []
    for p in parts:
        out.extend([p] if isinstance(p, str) else p)
    return "\n".join(out) + "\n" if out else ""
