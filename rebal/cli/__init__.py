"""The command line, one module per area:

- app.py            the typer app, global options, shared helpers, `main`
- status_cmd.py     status, history, where
- rebalance_cmd.py  plan, rebalance, runs
- replicate_cmd.py  replicate, backups, restore, verify
- service_cmd.py    health, notify, metrics, scrub, run, daemon
- config_cmd.py     config check
- gate_cmd.py       gate (ssh forced command), prune (retention on the backup host)
- progress.py       progress bars and event printers of long commands

Rendering lives in `rebal.views` (pure functions, no printing)."""

from .app import app, main
from . import commands  # noqa: F401,E402  (registers the commands)

__all__ = ["app", "main"]
