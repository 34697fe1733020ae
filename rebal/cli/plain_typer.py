"""typer, imported without its rich help formatting.

typer 0.15 (what Debian 13 ships, and so what the .deb and the lane's guest run) imports its rich
help formatter whenever rich is installed: rich's markdown and syntax modules, markdown-it and
pygments, on every start, for help and error text that rebal asks for in plain form
(`rich_markup_mode=None`). That is about 0.15 s of every command on a PC (`rebal --version` 0.25 s
against 0.10 s with typer 0.26, which imports it only when it is used) and 2.5 s under the lane's
TCG guest, so bench/startup.py's 150 ms goal was missed on Debian 13. rebal therefore imports typer
once with rich hidden from it: typer then formats help and errors as plain click does, exactly what
rebal asked for. rich itself is imported as usual afterwards where rebal draws progress bars."""

from __future__ import annotations

import sys


def import_typer() -> None:
    """Import typer (once, before anything else imports it) with rich hidden from it."""
    if "typer" in sys.modules or "rich" in sys.modules:
        return  # too late to matter, or rich is loaded anyway: typer imports as it likes
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        import typer  # noqa: F401
    finally:
        del sys.modules["rich"]
