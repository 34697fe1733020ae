"""rebal rebuild: a pool destroyed and made again, its data restored from the backup."""

from __future__ import annotations

import random
from dataclasses import asdict
from typing import Annotated, Optional

import typer

from . import complete
from .app import JsonOpt, app
from .io import Signals, load_config, out_json, out_text


@app.command()
def rebuild(
    pool: Annotated[str, typer.Argument(help="The pool to rebuild.", autocompletion=complete.pools)],
    job: Annotated[Optional[str], typer.Option("--job", help="The zfs replication job that backs the pool up (to start).", autocompletion=complete.replication_jobs)] = None,
    go_on: Annotated[bool, typer.Option("--continue", help="After you made the new pool: restore, keys, properties, verify.")] = False,
    show: Annotated[bool, typer.Option("--status", help="Where the rebuild stands, and the commands that are yours to run.")] = False,
    leave_out: Annotated[Optional[list[str]], typer.Option("--leave-out", help="A dataset not in the job that may be lost with the pool (repeat).")] = None,
    ashift: Annotated[int, typer.Option("--ashift", min=9, max=16, help="Sector size (2^N) for the new pool's zpool create.")] = 12,
    writers_stopped: Annotated[bool, typer.Option("--writers-stopped", help="Where the ZFS has no written@ property: you stopped every writer.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild a pool from its backup: check and record (--job), then you destroy and recreate the pool, then --continue.

    rebal never destroys the pool: it says what to run. Each step is recorded; a cut one goes on when run again."""
    from ..errors import UsageError
    from ..recover import rebuild as R
    from ..views.rebuild import rebuild_text

    cfg = load_config()
    if sum([bool(job), go_on, show]) != 1:
        raise UsageError("give one of --job JOB (check and record), --continue (after the new pool exists), --status")
    if show:
        rec = R.status(cfg, pool)
    elif go_on:
        with Signals() as sig:
            rec = R.go_on(cfg, pool, stop=sig.stop)
    elif job:
        rec = R.check(cfg, pool, job, leave_out=tuple(leave_out or ()), ashift=ashift,
                      seed=random.SystemRandom().randrange(2**31), writers_stopped=writers_stopped)
    if as_json:
        out_json(asdict(rec))
    else:
        out_text(rebuild_text(rec))
