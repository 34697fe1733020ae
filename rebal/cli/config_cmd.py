"""rebal config check."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import OPTS, JsonOpt, config_app, out_json, out_text


@config_app.command("check")
def config_check(
    file: Annotated[Optional[str], typer.Argument(help="File to check [default: the --config file].")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a config file: one line per problem, naming the key and the file; exit 2 if any."""
    from .. import config
    from ..errors import ConfigError

    path = file or config.config_path(OPTS.config)[0]
    try:
        cfg = config.load(path, check_cron=True)
    except ConfigError as e:
        if as_json:
            out_json({"file": path, "ok": False, "problems": e.problems})
        raise
    if as_json:
        out_json({"file": path, "ok": True, "problems": [], "jobs": [j.name for j in cfg.replicate],
                  "state_db": cfg.state_db})
        return
    out_text(f"{path}: OK ({len(cfg.replicate)} replication job(s), state database {cfg.state_db})\n")
