"""rebal failover / failback: serve from the backup while the file server is down, then bring it back."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from . import complete
from .app import JsonOpt, app
from .io import Signals, load_config, open_state, out_json, out_text

if TYPE_CHECKING:
    from ..config import Config, Replicate

JobArg = Annotated[str, typer.Argument(help="A zfs replication job, described on the backup host as a pull job.",
                                       autocompletion=complete.replication_jobs)]


def _status(cfg: Config, job: Replicate, as_json: bool) -> None:
    """`--status` of both commands: whether the job is failed over, and where its failback stands."""
    from ..recover.failover import status
    from ..views.failover import status_text

    st = status(job, open_state(cfg))
    out_json(st) if as_json else out_text(status_text(st))


@app.command()
def failover(
    job: JobArg,
    mountpoint_root: Annotated[Optional[str], typer.Option("--mountpoint-root", metavar="DIR", help="Mount the job's top dataset here (its children below it); else where the backup pool puts them.")] = None,
    show: Annotated[bool, typer.Option("--status", help="Say whether the job is failed over, and where its failback stands.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say every step; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """On the backup host, while the file server is down: make the job's backup writable and mounted.

    Nothing may receive into it afterwards (the gate refuses, a pull run refuses) until `rebal failback`."""
    from ..recover.failover import failover as do
    from ..replicate.job import find_job
    from ..views.failover import failover_text

    cfg = load_config()
    j = find_job(cfg, job)
    if show:
        return _status(cfg, j, as_json)
    rep = do(j, None if dry_run else open_state(cfg), mountpoint_root=mountpoint_root, dry_run=dry_run)
    out_json(asdict(rep) | {"dry_run": dry_run}) if as_json else out_text(failover_text(rep, dry_run))


@app.command()
def failback(
    job: JobArg,
    discard_diverged: Annotated[bool, typer.Option("--discard-diverged", help="Roll back what the file server wrote after the last replication WITHOUT keeping it (else it is kept in POOL/rebal-diverged-...).")] = False,
    show: Annotated[bool, typer.Option("--status", help="Where the failover and the failback stand.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say every step, and what the file server wrote after the last replication; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """On the backup host, once the file server is back: send it what was written here, keep what it wrote meanwhile, return the direction.

    Every step is resumed by running the same command again."""
    from ..recover.failback import FailbackFailed, run_failback
    from ..replicate.job import find_job
    from ..views.failover import failback_text
    from .progress import ByteBar

    cfg = load_config()
    j = find_job(cfg, job)
    if show:
        return _status(cfg, j, as_json)
    with Signals() as sig, ByteBar(f"failback {job}", enabled=not (as_json or dry_run)) as bar:
        try:
            rep = run_failback(cfg, j, discard_diverged=discard_diverged, dry_run=dry_run, stop=sig.stop,
                               progress=bar.update)
        except FailbackFailed as e:
            if as_json:
                out_json(asdict(e.report) | {"dry_run": dry_run, "error": str(e)})
            else:
                out_text(failback_text(e.report, dry_run))
            raise
    out_json(asdict(rep) | {"dry_run": dry_run}) if as_json else out_text(failback_text(rep, dry_run))
