"""rebal refresh."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from .app import JsonOpt, app
from .io import Signals, end_of_run, load_config, open_state, out_json, out_text
from .rebalance_cmd import ExcludeOpt, MaxBytesOpt, MethodOpt


@app.command()
def refresh(
    paths: Annotated[list[str], typer.Argument(help="Datasets' directories (files or directories on one pool).")],
    plan: Annotated[bool, typer.Option("--plan", help="Measure and predict only (a sample of a big tree); change nothing.")] = False,
    sample: Annotated[int, typer.Option(min=1, help="With --plan: read the block pointers of at most this many files.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the sample.")] = 0,
    max_bytes: MaxBytesOpt = None,
    until: Annotated[Optional[str], typer.Option(metavar="HH:MM", help="Stop cleanly at this time of day.")] = None,
    max_rate: Annotated[Optional[str], typer.Option(metavar="RATE", help="Rewrite at most this many bytes per second (e.g. 200M).")] = None,
    verify: Annotated[Optional[str], typer.Option(metavar="hash|size|none", help="How a copy is checked [default: config].")] = None,
    method: MethodOpt = None,
    jobs: Annotated[Optional[int], typer.Option(metavar="N", help="Files rewritten at once.")] = None,
    exclude: ExcludeOpt = None,
    allow_snapshots: Annotated[bool, typer.Option("--allow-snapshots", help="Rewrite data that snapshots pin (grows the pool until they go).")] = False,
    max_growth: Annotated[Optional[str], typer.Option(metavar="SIZE", help="With --allow-snapshots: stop before the pool grows by more than this.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Measure every file, say what each pass would rewrite; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Rewrite data written under properties its dataset no longer has (compression, checksum, copies,
    dedup, recordsize), measured from the block pointers: `zfs rewrite` where it can apply the change,
    a verified copy where the block size changes."""
    from .. import refresh as refresh_run
    from ..zfs.host import ZfsHost

    host = ZfsHost.here()
    if plan:
        hardlinks = load_config().rebalance.hardlinks  # which files a run would leave depends on it
        p = refresh_run.plan(paths, host, sample=sample, seed=seed, hardlinks=hardlinks, method=method)
        if as_json:
            out_json(p)
        else:
            from ..views.refresh import plan_text

            out_text(plan_text(p))
        return
    from ..rebalance.options import RefusedError

    if os.geteuid() != 0 and not dry_run:
        raise RefusedError("rebal refresh runs as root: it must keep every file's owner")
    cfg = load_config()
    conn = open_state(cfg)
    given = {"max_bytes": max_bytes, "until": until, "max_rate": max_rate, "verify": verify, "method": method,
             "jobs": jobs, "exclude": exclude, "allow_snapshots": allow_snapshots, "max_growth": max_growth}
    from .progress import JsonEvents, LineEvents

    from ..jobs import record

    with Signals() as sig:
        events = JsonEvents() if as_json else LineEvents()
        with events:
            def go() -> dict:
                return refresh_run.refresh(cfg, paths, host, conn, given=given, events=events, stop=sig.stop,
                                           dry_run=dry_run, progress=getattr(events, "measuring", None))

            rep = go() if dry_run else record(conn, "refresh", go)  # a run by hand is recorded as the timer's is
    from ..views.refresh import report_text

    end_of_run(rep, as_json, report_text, sig)
