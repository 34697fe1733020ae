"""`rebal status` without typer. Status is the command people and timers run most, and typer and
click cost more start-up than the command's own work. When
the command line is exactly `rebal [--config FILE | -c FILE] status [--json] [POOL...]`, `main`
runs it here; anything else (help, another option, another command) goes to typer, which parses
the same command line the same way (a test holds both to the same output)."""

from __future__ import annotations

import logging
import os
import sys

from .io import OPTS, guarded, load_config, open_state, out_json, out_text, warn


def show_status(pools: list[str], as_json: bool) -> None:
    """The body of `rebal status` (typer's and the fast path's)."""
    from .. import fill, state
    from ..errors import RebalError
    from ..zfs.cli import Zpool

    cfg = load_config()
    found = Zpool().pools(list(pools or cfg.pools))
    target = cfg.rebalance.target_spread
    replication: list[dict] = []
    waiting: list[dict] = []
    try:
        conn = open_state(cfg)
        for p in found:
            state.record_sample(conn, p)
        if cfg.replicate:
            replication = state.last_successes(conn, cfg)
        from ..services import rebalance_findings

        waiting = [f.as_dict() for f in rebalance_findings(conn)]
        conn.close()
    except RebalError as e:
        warn(f"sample not recorded: {e}")
    if as_json:
        out_json({"pools": [fill.pool_json(p, target) for p in found], "replication": replication,
                  "rebalance": waiting})
        return
    from ..views.status import status_text

    out_text(status_text(found, target, replication) + "".join(f"{w['subject']}: {w['message']}\n" for w in waiting))


def parse(argv: list[str]) -> tuple[str | None, list[str], bool] | None:
    """(config, pools, as_json) when ``argv`` is a plain status command line, else None."""
    config = None
    i = 0
    while i < len(argv) and argv[i] != "status":
        a = argv[i]
        if a in ("--config", "-c") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            config = argv[i + 1]
            i += 2
        elif a.startswith("--config=") and len(a) > len("--config="):
            config = a[len("--config="):]
            i += 1
        else:
            return None
    if i == len(argv):
        return None
    pools: list[str] = []
    as_json = False
    for a in argv[i + 1:]:
        if a == "--json":
            as_json = True
        elif a.startswith("-") or not a:
            return None  # --help, -h, --, an unknown option: typer says what it says
        else:
            pools.append(a)
    return config, pools, as_json


def try_fast(argv: list[str]) -> bool:
    """Run ``argv`` here if it is a plain status command line; False to leave it to typer."""
    if os.environ.get("REBAL_NO_FAST") or any(k.startswith("_REBAL_COMPLETE") for k in os.environ):
        return False
    got = parse(argv)
    if got is None:
        return False
    OPTS.config, pools, as_json = got
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    guarded(lambda: show_status(pools, as_json))
    return True
