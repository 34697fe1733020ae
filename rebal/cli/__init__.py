"""The command line, one module per area:

- app.py            the typer app, global options, `main` through typer
- io.py             what every command shares and needs no typer (config, state, output, errors)
- fast.py           `rebal status` without typer (the command run most; start-up time counts)
- status_cmd.py     status, history, where
- rebalance_cmd.py  plan, rebalance, runs
- replicate_cmd.py  replicate, backups, restore, verify
- service_cmd.py    health, notify, metrics, scrub, run, daemon
- config_cmd.py     config check
- gate_cmd.py       gate (ssh forced command), prune (retention on the backup host)
- progress.py       progress bars and event printers of long commands

Rendering lives in `rebal.views` (pure functions, no printing)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """The `rebal` entry point: a plain `rebal status` runs without typer; everything else via typer."""
    from .fast import try_fast

    if try_fast(sys.argv[1:] if argv is None else list(argv)):
        return
    from .app import main as typer_main

    typer_main(argv)


__all__ = ["main"]  # the typer app: rebal.cli.app.app, after rebal.cli.commands.load()
