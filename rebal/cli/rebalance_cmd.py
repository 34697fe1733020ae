"""rebal plan, rebal rebalance, rebal runs.

Each option is declared once, below; `rebal.rebalance.prepare.options_from` turns what the command
line gives (`ctx.params`, by the options' names) and the config's [rebalance] table into Options."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any, Optional, TYPE_CHECKING

import typer

from . import complete
from .app import JsonOpt, app
from ..errors import UsageError
from ..outcome import Outcome
from .io import Signals, end_of_run, load_config, open_state, out_json, out_text, state_or_none

if TYPE_CHECKING:
    from ..config import Config
    from ..readspeed import ReadResult
    from ..rebalance.options import Options
    from ..rebalance.prepare import Prepared
    from ..zfs.host import ZfsHost
    from .progress import JsonEvents, ProgressEvents

TargetsArg = Annotated[list[str], typer.Argument(help="Datasets (tank/data) or directories inside mounted datasets.",
                                                 autocompletion=complete.datasets)]
SpreadOpt = Annotated[Optional[float], typer.Option("--target-spread", metavar="POINTS", help="Stop under this spread, in points [default: config].")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option("--exclude", metavar="GLOB", help="Glob of files or directories to leave alone (repeatable).")]
MinAgeOpt = Annotated[Optional[float], typer.Option("--min-age", metavar="DAYS", help="Only files not modified for this many days.")]
MinSizeOpt = Annotated[Optional[str], typer.Option("--min-size", metavar="SIZE", help="Only files at least this big (e.g. 1M).")]
MaxSizeOpt = Annotated[Optional[str], typer.Option("--max-size", metavar="SIZE", help="Only files at most this big (e.g. 10G).")]
MaxBytesOpt = Annotated[Optional[str], typer.Option("--max-bytes", metavar="SIZE", help="Rewrite at most this much (e.g. 500G).")]
MethodOpt = Annotated[Optional[str], typer.Option("--method", metavar="auto|copy|rewrite", help="auto, copy or rewrite [default: config].")]
HardlinksOpt = Annotated[bool, typer.Option("--hardlinks", help="Re-create hardlink groups that lie wholly in the targets [default: config].")]
NoSteerOpt = Annotated[bool, typer.Option("--no-steer", help="Let ZFS place the rewritten data as it would (no zfs_mg_noalloc_threshold during the run) [default: config's steer].")]
ToOpt = Annotated[Optional[str], typer.Option("--to", metavar="special", help="special: rewrite the files whose metadata and small blocks a special vdev would now take (measured from the block pointers), instead of balancing.")]
PlacementOpt = Annotated[str, typer.Option("--placement", metavar="auto|measured|model", help="Where old data lies: measured (zdb reads the block pointers), model (a guess from the fill), or auto (measured where zdb can).")]

def _options(ctx: typer.Context, cfg: Config, **extra: Any) -> Options:
    """The planner's options from what the command line gave: each one a keyword of options_from
    (declared there once, by the option's name); the command's own (--json, --dry-run...) stay here."""
    from ..rebalance.options import PLANNER_OPTIONS, options_from

    given = {k: v for k, v in ctx.params.items() if k in PLANNER_OPTIONS}
    return options_from(cfg, ctx.params["targets"], **given, **extra)


@app.command()
def plan(
    ctx: typer.Context,
    targets: TargetsArg,
    target_spread: SpreadOpt = None,
    exclude: ExcludeOpt = None,
    min_age: MinAgeOpt = None,
    min_size: MinSizeOpt = None,
    max_size: MaxSizeOpt = None,
    max_bytes: MaxBytesOpt = None,
    method: MethodOpt = None,
    hardlinks: HardlinksOpt = False,
    placement: PlacementOpt = "auto",
    no_steer: NoSteerOpt = False,
    to: ToOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Dry run: what a rebalance would rewrite, and the predicted CAP per vdev after. Changes nothing."""
    from ..rebalance.prepare import prepare
    from ..views.rebalance import plan_json, plan_text
    from ..zfs.host import ZfsHost

    if _to(to):
        from .. import special
        from ..views.special import plan_text as special_text

        s = special.plan(targets, ZfsHost.here())
        if as_json:
            out_json(s)
        else:
            out_text(special_text(s))
        return
    cfg = load_config()
    prep = prepare(_options(ctx, cfg), ZfsHost.here(), state_or_none(cfg))
    if as_json:
        out_json(plan_json(prep))
    else:
        out_text(plan_text(prep))


@app.command()
def rebalance(
    ctx: typer.Context,
    targets: TargetsArg,
    target_spread: SpreadOpt = None,
    max_bytes: MaxBytesOpt = None,
    until: Annotated[Optional[str], typer.Option(metavar="HH:MM", help="Stop cleanly at this time of day.")] = None,
    max_rate: Annotated[Optional[str], typer.Option(metavar="RATE", help="Rewrite at most this many bytes per second (e.g. 200M).")] = None,
    verify: Annotated[Optional[str], typer.Option(metavar="hash|size|none", help="How a copy is checked [default: config].")] = None,
    method: MethodOpt = None,
    jobs: Annotated[Optional[int], typer.Option(metavar="N", help="Files rewritten at once [default: from vdevs and cores].")] = None,
    exclude: ExcludeOpt = None,
    min_age: MinAgeOpt = None,
    min_size: MinSizeOpt = None,
    max_size: MaxSizeOpt = None,
    allow_snapshots: Annotated[bool, typer.Option("--allow-snapshots", help="Rewrite data that snapshots pin (grows the pool until they go).")] = False,
    max_growth: Annotated[Optional[str], typer.Option(metavar="SIZE", help="With --allow-snapshots: stop before the pool grows by more than this (e.g. 50G) [default: config, else the reserve decides].")] = None,
    hardlinks: HardlinksOpt = False,
    rewrite_all: Annotated[bool, typer.Option("--all", help="Rewrite every eligible file, whatever the spread (e.g. after a RAIDZ expansion).")] = False,
    placement: PlacementOpt = "auto",
    no_steer: NoSteerOpt = False,
    to: ToOpt = None,
    measure_read: Annotated[bool, typer.Option("--measure-read", help="Read a sample of the targets before and after (as `rebal where --read`) and record which vdevs served it, and how fast.")] = False,
    read_bytes: Annotated[str, typer.Option("--read-bytes", metavar="SIZE", help="With --measure-read: read about this much each time.")] = "1G",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan and change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per directory done, and one at the end.")] = False,
) -> None:
    """Rewrite files so ZFS spreads them over every vdev, until the spread is under the target."""
    from ..rebalance import engine, prepare
    from ..views.rebalance import plan_json, plan_text, report_text
    from ..zfs.host import ZfsHost

    cfg = load_config()
    if _to(to):
        return _to_special(cfg, ctx.params)
    opts = _options(ctx, cfg, listing=not dry_run)
    host = ZfsHost.here()
    if dry_run:
        prep = prepare.prepare(opts, host, state_or_none(cfg))
        if as_json:
            out_json(plan_json(prep) | {"dry_run": True})
        else:
            out_text(plan_text(prep) + "dry run: nothing was changed\n")
        return
    if os.geteuid() != 0:
        raise prepare.RefusedError("rebal rebalance runs as root: it must keep every file's owner")
    conn = open_state(cfg)
    # a rebalance of this pool running already: refused before the scan, and before its files are
    # taken for a crash's leftovers
    prep = prepare.ready(opts, host, conn, free=lambda pool: engine.PoolLock(cfg.state_db, pool).check_free())
    before = _read_measure(prep, host, read_bytes).as_dict() if measure_read else None

    def reading() -> dict:
        return {"before": before, "after": _read_measure(prep, host, read_bytes).as_dict()}

    with Signals() as sig:
        with _events(prep, as_json) as events:
            report = engine.execute(prep, opts, host, conn, cfg.state_db, events, sig.stop,
                                    stopped_by=sig.why, reading=reading if measure_read else None)
    done = report.as_dict()
    if as_json:
        print(json.dumps({"event": "done"} | done), flush=True)
    else:
        out_text(report_text(report))
        if report.read is not None:
            out_text(_reads_text(report.read))
    if report.outcome == Outcome.INTERRUPTED and sig.exit_code():
        raise typer.Exit(sig.exit_code())


def _events(prep: Prepared, as_json: bool) -> JsonEvents | ProgressEvents:
    """What a run tells as it goes: JSON lines, or a progress bar (the plan's warnings first)."""
    if as_json:
        from .progress import JsonEvents

        return JsonEvents()
    from .progress import ProgressEvents, console

    for w in prep.warnings:
        console(stderr=True).print(f"warning: {w}", markup=False)
    return ProgressEvents(prep)


def _to(to: str | None) -> bool:
    if to is None:
        return False
    if to != "special":
        raise UsageError(f"--to {to}: the one class a rebalance moves data to is special")
    return True


def _to_special(cfg: Config, params: dict) -> None:
    """rebal rebalance --to special: the files whose metadata and small blocks lie on the normal vdevs."""
    from .. import special

    given = {k: params[k] for k in ("max_bytes", "until", "max_rate", "verify", "method", "jobs", "exclude",
                                    "allow_snapshots", "max_growth")}
    targets, everything, dry_run, as_json = params["targets"], params["rewrite_all"], params["dry_run"], params["as_json"]
    from ..rebalance.options import RefusedError
    from ..views.special import report_text
    from ..zfs.host import ZfsHost

    if os.geteuid() != 0 and not dry_run:
        raise RefusedError("rebal rebalance runs as root: it must keep every file's owner")
    conn = open_state(cfg)
    from .progress import JsonEvents, LineEvents

    with Signals() as sig:
        events = JsonEvents() if as_json else LineEvents()
        with events:
            rep = special.rebalance(cfg, targets, ZfsHost.here(), conn, given=given, everything=everything,
                                    events=events, stop=sig.stop, dry_run=dry_run,
                                    progress=getattr(events, "measuring", None))
    end_of_run(rep, as_json, report_text, sig)


def _reads_text(read: dict) -> str:
    from ..views.rebalance import reads_text

    return reads_text(read)


def _read_measure(prep: Prepared, host: ZfsHost, read_bytes: str) -> ReadResult:
    from ..readspeed import measure_read
    from ..units import parse_size

    return measure_read([os.fsdecode(t.root) for t in prep.targets], host, budget=parse_size(read_bytes))


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
    if kind is not None and kind not in state.RUN_KINDS:
        raise UsageError(f"--kind {kind}: no such kind of run (kinds: {', '.join(state.RUN_KINDS)})")
    conn = open_state(cfg)
    if job is not None and cfg.job(job) is None and not state.list_runs(conn, job=job, limit=1):
        known = ", ".join(j.name for j in cfg.replicate) or "none configured"
        raise UsageError(f"--job {job}: no such job in the config and no run of it recorded (jobs: {known})")
    rows = state.list_runs(conn, kind=kind, job=job, limit=limit, state_db=cfg.state_db)
    if as_json:
        out_json({"runs": rows})
    else:
        out_text(runs_text(rows))
