"""rebal plan, rebal rebalance, rebal runs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import JsonOpt, app, choice, load_config, open_state, out_json, out_text, state_or_none
from .rebalance_run import METHODS, PLACEMENTS

TargetsArg = Annotated[list[str], typer.Argument(help="Datasets (tank/data) or directories inside mounted datasets.")]
SpreadOpt = Annotated[Optional[float], typer.Option("--target-spread", help="Stop under this spread, in points [default: config].")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option("--exclude", help="Glob of files or directories to leave alone (repeatable).")]
MinAgeOpt = Annotated[Optional[float], typer.Option("--min-age", help="Only files not modified for this many days.")]
MinSizeOpt = Annotated[Optional[str], typer.Option("--min-size", help="Only files at least this big (e.g. 1M).")]
MaxSizeOpt = Annotated[Optional[str], typer.Option("--max-size", help="Only files at most this big (e.g. 10G).")]
MaxBytesOpt = Annotated[Optional[str], typer.Option("--max-bytes", help="Rewrite at most this much (e.g. 500G).")]
PlacementOpt = Annotated[str, typer.Option("--placement", help="Where old data lies: measured (zdb reads the block pointers), model (a guess from the fill), or auto (measured where zdb can).")]


@app.command()
def plan(
    targets: TargetsArg,
    target_spread: SpreadOpt = None,
    exclude: ExcludeOpt = None,
    min_age: MinAgeOpt = None,
    min_size: MinSizeOpt = None,
    max_size: MaxSizeOpt = None,
    max_bytes: MaxBytesOpt = None,
    method: Annotated[str, typer.Option(help="auto, copy or rewrite.")] = "auto",
    hardlinks: Annotated[bool, typer.Option("--hardlinks", help="Plan to re-create hardlink groups inside the targets.")] = False,
    placement: PlacementOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Dry run: what a rebalance would rewrite, and the predicted CAP per vdev after. Changes nothing."""
    from ..rebalance.prepare import build_options, prepare
    from ..views.rebalance import plan_json, plan_text
    from ..zfs.cli import Zfs, Zpool

    cfg = load_config()
    opts = build_options(cfg.rebalance, targets, target_spread=target_spread, exclude=exclude, min_age=min_age,
                         min_size=min_size, max_size=max_size, max_bytes=max_bytes,
                         method=choice("--method", method, METHODS), hardlinks=hardlinks or cfg.rebalance.hardlinks,
                         replication_jobs=list(cfg.replicate), placement=choice("--placement", placement, PLACEMENTS))
    prep = prepare(opts, Zpool(), Zfs(), state_or_none(cfg))
    if as_json:
        out_json(plan_json(prep))
    else:
        out_text(plan_text(prep))


@app.command()
def rebalance(
    targets: TargetsArg,
    target_spread: SpreadOpt = None,
    max_bytes: MaxBytesOpt = None,
    until: Annotated[Optional[str], typer.Option(help="Stop cleanly at this time of day (HH:MM).")] = None,
    max_rate: Annotated[Optional[str], typer.Option(help="Rewrite at most this many bytes per second (e.g. 200M).")] = None,
    verify: Annotated[Optional[str], typer.Option(help="hash, size or none [default: config].")] = None,
    method: Annotated[Optional[str], typer.Option(help="auto, copy or rewrite [default: config].")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="Files rewritten at once [default: from vdevs and cores].")] = None,
    exclude: ExcludeOpt = None,
    min_age: MinAgeOpt = None,
    min_size: MinSizeOpt = None,
    max_size: MaxSizeOpt = None,
    allow_snapshots: Annotated[bool, typer.Option("--allow-snapshots", help="Rewrite data that snapshots pin (grows the pool until they go).")] = False,
    max_growth: Annotated[Optional[str], typer.Option(help="With --allow-snapshots: stop before the pool grows by more than this (e.g. 50G) [default: config, else the reserve decides].")] = None,
    hardlinks: Annotated[bool, typer.Option("--hardlinks", help="Re-create hardlink groups that lie wholly in the targets [default: config].")] = False,
    rewrite_all: Annotated[bool, typer.Option("--all", help="Rewrite every eligible file, whatever the spread (e.g. after a RAIDZ expansion).")] = False,
    placement: PlacementOpt = "auto",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan and change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per directory done, and one at the end.")] = False,
) -> None:
    """Rewrite files so ZFS spreads them over every vdev, until the spread is under the target."""
    from .rebalance_run import run

    code = run(targets, target_spread=target_spread, max_bytes=max_bytes, until=until, max_rate=max_rate,
               verify=verify, method=method, jobs=jobs, exclude=exclude, min_age=min_age, min_size=min_size,
               max_size=max_size, allow_snapshots=allow_snapshots, max_growth=max_growth, hardlinks=hardlinks,
               rewrite_all=rewrite_all, placement=placement, dry_run=dry_run, as_json=as_json)
    if code:
        raise typer.Exit(code)


@app.command()
def runs(
    kind: Annotated[Optional[str], typer.Option(help="Only runs of this kind (rebalance, replicate, ...).")] = None,
    job: Annotated[Optional[str], typer.Option(help="Only runs of this replication job.")] = None,
    limit: Annotated[int, typer.Option(help="How many of the newest runs.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Runs recorded in the state database: what, when, how much, spread before and after, outcome."""
    from .. import state
    from ..views.rebalance import runs_text

    cfg = load_config()
    rows = state.list_runs(open_state(cfg), kind=kind, job=job, limit=limit, state_db=cfg.state_db)
    if as_json:
        out_json({"runs": rows})
    else:
        out_text(runs_text(rows))
