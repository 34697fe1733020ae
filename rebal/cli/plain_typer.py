"""typer, imported without its rich help formatting.

rebal asks typer for plain help and error text (`rich_markup_mode=None`). Older typer (Debian 13's
0.15, so the .deb's) imports its rich help formatter anyway whenever rich is installed (rich's
markdown and syntax modules, markdown-it, pygments) on every start, and escapes the plain help's
brackets for a rich console that never prints it (`\\[required]`). Newer typer imports it only when
asked for it. So rebal imports typer once with rich hidden from it: typer then formats help and
errors as click does, which is what rebal asked for. rich itself is imported as usual afterwards,
where rebal draws progress bars. bench/startup.py measures the start-up."""

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
