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
        if argv is None:  # the program itself (not a caller in this process): done, skip the teardown
            _exit_now()
        return
    from .app import main as typer_main

    typer_main(argv)


def _exit_now() -> None:
    """Exit 0 without the interpreter's teardown (module and object finalisation, 0.08 s of a run's
    end in the lane's guest; issue 19). Everything is written by then: the state database commits
    each change as it goes, the fast path closes nothing else that could hold data, and the output
    is flushed here; a flush that fails leaves the normal exit to report it."""
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(0)


__all__ = ["main"]  # the typer app: rebal.cli.app.app, after rebal.cli.commands.load()
