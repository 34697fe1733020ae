"""The command line (typer), one module per area:

- app.py            the typer app, global options, logging set-up, `main`
- io.py             what every command shares: config, state, output, errors, signals
- status_cmd.py     status, history, where
- rebalance_cmd.py  plan, rebalance, runs
- refresh_cmd.py    refresh
- replicate_cmd.py  replicate, backups, restore, verify
- service_cmd.py    health, notify, metrics, scrub, run, daemon
- config_cmd.py     config check, units
- gate_cmd.py       gate (ssh forced command), prune (retention on the backup host)
- progress.py       progress bars and event printers of long commands
- plain_typer.py    typer imported without its rich help (Debian 13's typer loads it eagerly)

Rendering lives in `rebal.views` (pure functions, no printing)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The `rebal` entry point."""
    from .plain_typer import import_typer

    import_typer()  # first: typer without the rich help formatting rebal does not use (see there)
    from .app import main as app_main

    app_main(argv)


__all__ = ["main"]
