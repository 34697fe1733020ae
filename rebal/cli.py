"""The command line: parse, call a service, render. The only place that prints or exits."""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Optional

import typer

from . import __version__
from .errors import RebalError

app = typer.Typer(
    help="Keep a ZFS pool's data evenly spread over its vdevs, and safely copied to a backup host.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
config_app = typer.Typer(help="Check the configuration file.", no_args_is_help=True)
app.add_typer(config_app, name="config")

log = logging.getLogger("rebal")


@dataclass
class Options:
    config: Optional[str] = None
    debug: bool = False


OPTS = Options()
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def _version(value: bool) -> None:
    if value:
        print(f"rebal {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    config: Annotated[
        Optional[str],
        typer.Option("--config", "-c", metavar="FILE", help="Config file [default: $REBAL_CONFIG or /etc/rebal/config.toml]."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Log every command run; show tracebacks.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    OPTS.config = config
    OPTS.debug = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _config(check_cron: bool = False):
    from . import config

    return config.load(OPTS.config, check_cron=check_cron)


def _state(cfg):
    from . import state

    return state.connect(cfg.state_db)


def _out(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _trap_signals():
    """SIGINT/SIGTERM set a stop flag (the running step ends at a safe point) instead of killing us.
    Returns (stop event, signals received, the old handlers to put back)."""
    import signal
    import threading

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, _frame):
        got.append(signum)
        stop.set()

    return stop, got, {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}


def _warn(msg: str) -> None:
    print(f"rebal: warning: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# status


@app.command()
def status(
    pools: Annotated[Optional[list[str]], typer.Argument(help="Pools to show [default: config 'pools', else all].")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fill of every data vdev (size, alloc, free, CAP) and the pool's spread; records a sample."""
    from . import fill, state
    from .zfs.cli import Zpool

    cfg = _config()
    wanted = list(pools or cfg.pools)
    found = Zpool().pools(wanted)
    target = cfg.rebalance.target_spread
    replication: list[dict] = []
    try:
        conn = _state(cfg)
        for p in found:
            state.record_sample(conn, p)
        if cfg.replicate:
            replication = state.last_successes(conn, cfg)
        conn.close()
    except RebalError as e:
        _warn(f"sample not recorded: {e}")
    if as_json:
        _out({"pools": [fill.pool_json(p, target) for p in found], "replication": replication})
        return
    if not found:
        print("no pools imported")
    else:
        _render_status(found, target)
    for r in replication:
        if r["last_success"] is None:
            print(f"replication {r['job']} ({r['mode']}): never succeeded")
        else:
            print(f"replication {r['job']} ({r['mode']}): last success {fill.iso(r['last_success'])}, "
                  f"{_age(r['age_seconds'])} ago, snapshot {r['snapshot'] or '-'}")


def _age(seconds: float) -> str:
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f} {unit}"
    return f"{seconds:.0f} s"


def _render_status(pools, target: float) -> None:
    """Plain text (no rich import here: status is the command run most, by people and by timers)."""
    from . import fill
    from .units import human

    out = []
    for p in pools:
        verdict = f"over the target {target:g}" if p.spread > target else f"within the target {target:g}"
        out.append(f"{p.name}  {p.health}  size {human(p.size)}  alloc {human(p.alloc)}  free {human(p.free)}  "
                   f"CAP {p.cap:.0f}%")
        out.append(f"spread {p.spread:.1f} points ({verdict})")
        short = fill.short_names([v.name for v in p.vdevs])
        rows = [("VDEV", "TYPE", "SIZE", "ALLOC", "FREE", "CAP", "")]
        for v in p.data_vdevs:
            rows.append((short[v.name], v.type, human(v.size), human(v.alloc), human(v.free), f"{v.cap:.1f}%",
                         fill.bar(v.cap)))
        for v in p.other_vdevs:
            rows.append((short[v.name], v.vclass, "", "", "", "", "(not counted)"))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for r in rows:
            cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1])] + [r[i].rjust(widths[i]) for i in range(2, 6)]
            out.append("  ".join(cells + [r[6]]).rstrip())
        if any(not v.exact for v in p.data_vdevs):
            out.append("(figures from 'zpool iostat -v' are rounded to 3 digits)")
        out.append("")
    sys.stdout.write("\n".join(out))


# ---------------------------------------------------------------------------------------------
# history


@app.command()
def history(
    pool: Annotated[str, typer.Argument(help="Pool name.")],
    since: Annotated[Optional[str], typer.Option(help="Only samples newer than this: 7d, 12h, or a date.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per-vdev CAP over time, from the samples that status and the daemon record."""
    from . import fill, names, state

    names.pool(pool)
    cfg = _config()
    conn = _state(cfg)
    rows = state.samples(conn, pool, fill.parse_since(since) if since else None)
    if as_json:
        _out(fill.history_json(pool, rows))
        return
    if not rows:
        print(f"no samples of pool {pool} yet (run 'rebal status {pool}', or the daemon)")
        return
    _render_history(pool, rows)


def _render_history(pool, rows) -> None:
    from rich.table import Table

    from . import fill

    con = _console()
    series = fill.history_series(rows)
    short = fill.short_names(list(series))
    con.print(f"[bold]{pool}[/]: {len(rows)} samples, {fill.iso(rows[0].ts)} .. {fill.iso(rows[-1].ts)}")
    chart = Table(box=None, show_header=True, pad_edge=False)
    chart.add_column("VDEV")
    chart.add_column("CAP over time (0-100%)")
    chart.add_column("NOW", justify="right")
    for name, caps in series.items():
        chart.add_row(short[name], fill.sparkline(caps), f"{caps[-1]:.1f}%")
    con.print(chart)
    con.print()
    t = Table(box=None, pad_edge=False)
    t.add_column("TIME (UTC)", no_wrap=True)
    t.add_column("SPREAD", justify="right")
    for name in series:
        t.add_column(short[name], justify="right", no_wrap=True)
    shown = rows if len(rows) <= 20 else rows[:: max(1, len(rows) // 20)][:19] + [rows[-1]]
    for r in shown:
        cells = []
        for name in series:
            size, alloc = r.vdevs.get(name, (0, 0))
            cells.append(f"{100.0 * alloc / size:.1f}%" if size else "-")
        t.add_row(fill.iso(r.ts), f"{r.spread:.1f}", *cells)
    con.print(t)


# ---------------------------------------------------------------------------------------------
# plan / rebalance / runs

TargetsArg = Annotated[list[str], typer.Argument(help="Datasets (tank/data) or directories inside mounted datasets.")]
SpreadOpt = Annotated[Optional[float], typer.Option("--target-spread", help="Stop under this spread, in points [default: config].")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option("--exclude", help="Glob of files or directories to leave alone (repeatable).")]
MinAgeOpt = Annotated[Optional[float], typer.Option("--min-age", help="Only files not modified for this many days.")]
MinSizeOpt = Annotated[Optional[str], typer.Option("--min-size", help="Only files at least this big (e.g. 1M).")]
MaxSizeOpt = Annotated[Optional[str], typer.Option("--max-size", help="Only files at most this big (e.g. 10G).")]
MaxBytesOpt = Annotated[Optional[str], typer.Option("--max-bytes", help="Rewrite at most this much (e.g. 500G).")]


def _options(cfg, targets, target_spread, exclude, min_age, min_size, max_size, max_bytes, **kw):
    from .rebalance.engine import Options
    from .rebalance.scan import Filters
    from .units import parse_size

    rb = cfg.rebalance
    spread = rb.target_spread if target_spread is None else target_spread
    if not 0 < spread <= 100:
        from .errors import UsageError

        raise UsageError("--target-spread must be more than 0 and at most 100")
    filters = Filters(
        exclude=tuple(rb.exclude) + tuple(exclude or ()),
        min_age_days=rb.min_age_days if min_age is None else min_age,
        min_size=parse_size(min_size) if min_size else 0,
        max_size=parse_size(max_size) if max_size else None,
    )
    return Options(
        targets=list(targets),
        target_spread=spread,
        max_bytes=parse_size(max_bytes) if max_bytes else None,
        reserve_percent=rb.reserve_percent,
        filters=filters,
        **kw,
    )


def _plan_json(prep) -> dict:
    from .fill import iso  # noqa: F401  (keeps the import cheap path shared)

    plan = prep.plan
    after = {v.name: v for v in plan.after}
    return {
        "pool": prep.pool.name,
        "targets": [{"dataset": t.dataset, "path": os.fsdecode(t.root)} for t in prep.targets],
        "method": prep.method + (" -P" if prep.physical else ""),
        "jobs": prep.jobs,
        "target_spread": plan.target,
        "spread_now": round(plan.spread_before, 2),
        "spread_predicted": round(plan.spread_after, 2),
        "bytes_needed": plan.needed_bytes,
        "bytes_planned": plan.bytes,
        "files_planned": plan.files,
        "bytes_eligible": plan.candidate_bytes,
        "files_eligible": prep.scan.files,
        "pinned_bytes": prep.scan.pinned_bytes,
        "vdevs": [
            {"name": v.name, "size": v.size, "alloc": v.alloc, "cap": round(v.cap, 2),
             "predicted_alloc": after[v.name].alloc, "predicted_cap": round(after[v.name].cap, 2)}
            for v in plan.before
        ],
        "dirs": [{"path": os.fsdecode(d.path), "files": d.files, "bytes": d.bytes} for d in plan.dirs],
        "skipped": {
            k: {"count": n, "bytes": prep.scan.skips.bytes.get(k, 0), "examples": prep.scan.skips.examples.get(k, [])}
            for k, n in prep.scan.skips.counts.items()
        },
        "warnings": prep.warnings,
        "notes": prep.notes,
        "resumes_run": prep.resume_run,
    }


def _render_plan(prep, max_dirs: int = 30) -> None:
    from rich.table import Table

    from . import fill
    from .units import human

    con = _console()
    plan = prep.plan
    short = fill.short_names([v.name for v in plan.before])
    con.print(f"[bold]{prep.pool.name}[/]: spread now [bold]{plan.spread_before:.1f}[/] points, target {plan.target:g}; "
              f"method: {prep.method}{' -P' if prep.physical else ''}, {prep.jobs} files at once")
    t = Table(box=None, pad_edge=False)
    for col in ("VDEV", "SIZE", "ALLOC", "CAP NOW", "CAP AFTER (predicted)"):
        t.add_column(col, justify="left" if col == "VDEV" else "right")
    after = {v.name: v for v in plan.after}
    for v in plan.before:
        t.add_row(short[v.name], human(v.size), human(v.alloc), f"{v.cap:.1f}%", f"{after[v.name].cap:.1f}%")
    con.print(t)
    if plan.needed_bytes == 0:
        con.print("[green]the spread is already within the target: nothing to do[/]")
    elif plan.needed_bytes is None:
        con.print(f"predicted spread after rewriting everything eligible: [bold]{plan.spread_after:.1f}[/] points "
                  "(the target is not reachable with these directories)")
    else:
        con.print(f"predicted spread after: [bold]{plan.spread_after:.1f}[/] points, after rewriting about "
                  f"{human(plan.needed_bytes)} (of {human(plan.candidate_bytes)} eligible in {prep.scan.files} files)")
    if plan.dirs:
        con.print(f"\ndirectories to rewrite, in order ({len(plan.dirs)}; the rebalance goes on past them "
                  "if the measured spread is still over the target):")
        d = Table(box=None, pad_edge=False)
        d.add_column("BYTES", justify="right")
        d.add_column("FILES", justify="right")
        d.add_column("DIRECTORY", overflow="fold")
        for e in plan.dirs[:max_dirs]:
            d.add_row(human(e.bytes), str(e.files), os.fsdecode(e.path))
        if len(plan.dirs) > max_dirs:
            d.add_row("", "", f"... and {len(plan.dirs) - max_dirs} more (--json lists all)")
        con.print(d)
    skips = prep.scan.skips
    if skips.counts:
        con.print("\nleft alone:")
        for k, n in skips.counts.items():
            b = skips.bytes.get(k, 0)
            con.print(f"  {n} {k}" + (f", {human(b)}" if b else "") + f"  (e.g. {skips.examples[k][0]})")
    for w in prep.warnings:
        con.print(f"[yellow]warning:[/] {w}")
    for n in prep.notes:
        con.print(f"note: {n}")
    if prep.resume_run is not None:
        con.print(f"note: continues unfinished run {prep.resume_run} ({len(prep.done_dirs)} directories already done)")


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
    as_json: JsonOpt = False,
) -> None:
    """Dry run: what a rebalance would rewrite, and the predicted CAP per vdev after. Changes nothing."""
    from .rebalance.engine import prepare
    from .zfs.cli import Zfs, Zpool

    cfg = _config()
    opts = _options(cfg, targets, target_spread, exclude, min_age, min_size, max_size, max_bytes,
                    method=_choice("--method", method, ("auto", "copy", "rewrite")),
                    hardlinks=hardlinks or cfg.rebalance.hardlinks)
    conn = _state_or_none(cfg)
    prep = prepare(opts, Zpool(), Zfs(), conn)
    if as_json:
        _out(_plan_json(prep))
    else:
        _render_plan(prep)


def _choice(opt: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        from .errors import UsageError

        raise UsageError(f"{opt} must be one of: {', '.join(allowed)}")
    return value


def _state_or_none(cfg):
    try:
        return _state(cfg)
    except RebalError as e:
        _warn(f"{e} (the plan cannot see unfinished runs)")
        return None


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
    allow_snapshots: Annotated[bool, typer.Option("--allow-snapshots", help="Rewrite data that snapshots pin (grows the pool).")] = False,
    hardlinks: Annotated[bool, typer.Option("--hardlinks", help="Re-create hardlink groups that lie wholly in the targets [default: config].")] = False,
    rewrite_all: Annotated[bool, typer.Option("--all", help="Rewrite every eligible file, whatever the spread (e.g. after a RAIDZ expansion).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan and change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per directory done, and one at the end.")] = False,
) -> None:
    """Rewrite files so ZFS spreads them over every vdev, until the spread is under the target."""
    import signal
    import threading

    from .errors import UsageError
    from .rebalance import engine
    from .units import parse_size
    from .zfs.cli import Zfs, Zpool

    cfg = _config()
    rb = cfg.rebalance
    if jobs is not None and not 1 <= jobs <= 64:
        raise UsageError("--jobs must be between 1 and 64")
    opts = _options(
        cfg, targets, target_spread, exclude, min_age, min_size, max_size, max_bytes,
        until=engine.until_epoch(until) if until else None,
        max_rate=parse_size(max_rate) if max_rate else (parse_size(rb.max_rate) if rb.max_rate else None),
        verify=_choice("--verify", verify or rb.verify, ("hash", "size", "none")),
        method=_choice("--method", method or rb.method, ("auto", "copy", "rewrite")),
        jobs=jobs or rb.jobs,
        allow_snapshots=allow_snapshots or rb.allow_snapshots,
        rewrite_all=rewrite_all,
        hardlinks=hardlinks or rb.hardlinks,
    )
    zpool, zfs = Zpool(), Zfs()
    if dry_run:
        conn = _state_or_none(cfg)
        prep = engine.prepare(opts, zpool, zfs, conn)
        if as_json:
            _out(_plan_json(prep) | {"dry_run": True})
        else:
            _render_plan(prep)
            print("dry run: nothing was changed")
        return
    if os.geteuid() != 0:
        raise engine.RefusedError("rebal rebalance runs as root: it must keep every file's owner")
    conn = _state(cfg)
    prep = engine.prepare(opts, zpool, zfs, conn)
    if prep.scan.pinned_bytes and not opts.allow_snapshots:
        from .units import human

        raise engine.RefusedError(
            f"{human(prep.scan.pinned_bytes)} of the data to rewrite is held by snapshots of "
            f"{', '.join(sorted({t.dataset for t in prep.targets}))}: rewriting it would grow the pool by that much "
            "and move nothing. Destroy or expire the snapshots first, or pass --allow-snapshots to accept the cost."
        )
    stop, got, old = _trap_signals()
    try:
        events = _JsonEvents() if as_json else _ProgressEvents(prep)
        if not as_json:
            for w in prep.warnings:
                _console(stderr=True).print(f"[yellow]warning:[/] {w}")
        with events:
            report = engine.execute(prep, opts, zpool, zfs, conn, cfg.state_db, events, stop)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        report.outcome, report.reason = "interrupted", f"stopped by signal {signal.Signals(got[0]).name}"
        conn.execute("UPDATE runs SET outcome = 'interrupted' WHERE id = ?", (report.run_id,))
    if as_json:
        print(json.dumps({"event": "done"} | report.as_dict()), flush=True)
    else:
        _render_report(report)
    if report.outcome == "interrupted":
        raise typer.Exit(130 if got and got[0] == signal.SIGINT else 0)


class _JsonEvents:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def start(self, prep, total_files, total_bytes):
        print(json.dumps({"event": "start", "pool": prep.pool.name, "method": prep.method, "jobs": prep.jobs,
                          "files": total_files, "bytes": total_bytes,
                          "spread": round(prep.pool.spread, 2)}), flush=True)

    def file_done(self, ref, result):
        pass

    def dir_done(self, rep):
        print(json.dumps({"event": "dir", "path": os.fsdecode(rep.path), "files": rep.files, "bytes": rep.bytes,
                          "skipped": rep.skipped, "spread": None if rep.spread is None else round(rep.spread, 2)}),
              flush=True)

    def measured(self, spread):
        pass

    def note(self, text):
        print(json.dumps({"event": "note", "text": text}), flush=True)


class _ProgressEvents:
    """A rich progress bar on a terminal; a line per directory otherwise (logs, journald)."""

    def __init__(self, prep):
        self.prep = prep
        self.con = _console()
        self.tty = self.con.is_terminal
        self.progress = None
        self.spread = prep.pool.spread
        self.task_files = self.task_bytes = None

    def __enter__(self):
        if self.tty:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[files]} files"),
                DownloadColumn(binary_units=True), TransferSpeedColumn(), TimeRemainingColumn(),
                TextColumn("spread {task.fields[spread]}"), console=self.con,
            )
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.__exit__(*exc)
        return False

    def start(self, prep, total_files, total_bytes):
        if self.progress:
            self.total_files, self.files_done = total_files, 0
            self.task = self.progress.add_task("rebalance", total=total_bytes, spread=f"{self.spread:.1f}",
                                               files=f"0/{total_files}")
        else:
            from .units import human

            print(f"rebalance {prep.pool.name}: {total_files} files, {human(total_bytes)} eligible, "
                  f"spread {self.spread:.1f}, method {prep.method}, {prep.jobs} at once", flush=True)

    def file_done(self, ref, result):
        if self.progress:
            self.files_done += 1
            self.progress.update(self.task, advance=ref.size, files=f"{self.files_done}/{self.total_files}")

    def dir_done(self, rep):
        from .units import human

        if rep.spread is not None:
            self.spread = rep.spread
        if self.progress:
            self.progress.update(self.task, spread=f"{self.spread:.1f}")
        else:
            sk = ", ".join(f"{n} {k}" for k, n in rep.skipped.items())
            print(f"{os.fsdecode(rep.path)}: {rep.files} files, {human(rep.bytes)}"
                  + (f", skipped {sk}" if sk else "") + f"; spread {self.spread:.1f}", flush=True)

    def measured(self, spread):
        self.spread = spread

    def note(self, text):
        (self.progress.console if self.progress else self.con).print(f"note: {text}")


def _render_report(rep) -> None:
    from .units import human

    con = _console()
    rate = rep.bytes / rep.seconds if rep.seconds else 0
    con.print(f"[bold]{rep.outcome}[/]: {rep.reason}")
    con.print(f"rewrote {rep.files} files, {human(rep.bytes)} in {rep.dirs} directories, {rep.seconds:.1f} s "
              f"({human(rate)}/s); spread {rep.spread_before:.1f} -> {rep.spread_after:.1f} points "
              f"(predicted {rep.predicted_after:.1f}); run {rep.run_id}")
    if rep.skipped:
        con.print("skipped: " + ", ".join(f"{n} {k}" for k, n in rep.skipped.items()))


@app.command()
def runs(
    kind: Annotated[Optional[str], typer.Option(help="Only runs of this kind (rebalance, replicate, ...).")] = None,
    job: Annotated[Optional[str], typer.Option(help="Only runs of this replication job.")] = None,
    limit: Annotated[int, typer.Option(help="How many of the newest runs.")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """Runs recorded in the state database: what, when, how much, spread before and after, outcome."""
    from .fill import iso

    cfg = _config()
    conn = _state(cfg)
    q = "SELECT * FROM runs WHERE 1=1"
    args: list = []
    if kind:
        q += " AND kind = ?"
        args.append(kind)
    if job:
        q += " AND job = ?"
        args.append(job)
    q += " ORDER BY id DESC LIMIT ?"
    args.append(max(1, limit))
    rows = conn.execute(q, args).fetchall()
    out = []
    for r in rows:
        d = json.loads(r["details"]) if r["details"] else {}
        out.append({
            "id": r["id"], "kind": r["kind"], "job": r["job"], "pool": r["pool"],
            "started": iso(r["started"]), "ended": iso(r["ended"]) if r["ended"] else None,
            "seconds": round(r["ended"] - r["started"], 1) if r["ended"] else None,
            "outcome": r["outcome"] or "running or crashed", "error": r["error"], "details": d,
            "progress": r["progress"],
        })
    if as_json:
        _out({"runs": out})
        return
    if not out:
        print("no runs recorded yet")
        return
    from rich.table import Table

    from .units import human

    t = Table(box=None, pad_edge=False)
    for col in ("ID", "KIND", "POOL/JOB", "STARTED UTC", "FILES", "BYTES", "SPREAD", "OUTCOME"):
        t.add_column(col, justify="right" if col in ("ID", "FILES", "BYTES") else "left", no_wrap=True)
    for r in out:
        d = r["details"]
        spread = f"{d['spread_before']:.1f}->{d['spread_after']:.1f}" if "spread_before" in d else ""
        t.add_row(str(r["id"]), r["kind"], r["job"] or r["pool"] or "", r["started"][5:16].replace("T", " "),
                  str(d.get("files", "")), human(d["bytes"]) if "bytes" in d else "", spread, r["outcome"])
    _console().print(t)


# ---------------------------------------------------------------------------------------------
# replicate


@app.command()
def replicate(
    job: Annotated[str, typer.Argument(help="Name of a [[replicate]] job in the config.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be sent and pruned; change nothing.")] = False,
    force_rollback: Annotated[bool, typer.Option("--force-rollback", help="Let zfs receive -F roll back a target that changed or diverged.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Replicate a job to its backup host now (zfs send/receive or rsync, over ssh)."""
    import signal
    import threading

    from .replicate.job import run_job

    cfg = _config()
    stop, got, old = _trap_signals()
    bar = None
    try:
        bar = _byte_bar(f"replicate {job}") if not (as_json or dry_run) else None
        progress = (lambda n: bar[0].update(bar[1], completed=n)) if bar else None
        outcome, details = run_job(cfg, job, dry_run=dry_run, force_rollback=force_rollback, stop=stop,
                                   progress=progress)
    finally:
        if bar:
            bar[0].__exit__(None, None, None)
        for sig, h in old.items():
            signal.signal(sig, h)
    if as_json:
        _out(details | {"outcome": outcome})
    else:
        _render_replication(outcome, details)
    if outcome == "failed":
        raise typer.Exit(1)
    if outcome == "interrupted":
        raise typer.Exit(130 if got and got[0] == signal.SIGINT else 0)


def _byte_bar(label: str):
    """(Progress, task) of a rich bytes/rate bar on a terminal's stderr, or None elsewhere."""
    con = _console(stderr=True)
    if not con.is_terminal:
        return None
    from rich.progress import DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    bar = Progress(TextColumn(f"[bold]{label}"), DownloadColumn(binary_units=True), TransferSpeedColumn(),
                   console=con, transient=True)
    bar.__enter__()
    return bar, bar.add_task(label, total=None)


def _render_replication(outcome: str, d: dict) -> None:
    from .units import human

    con = _console()
    if d.get("dry_run"):
        con.print(f"dry run of job [bold]{d['job']}[/] ({d['mode']}): nothing was changed")
        for line in d.get("planned", []):
            con.print(f"  would run: {line}")
        return
    color = {"ok": "green", "warning": "yellow"}.get(outcome, "red")
    con.print(f"[bold {color}]{outcome}[/]: job {d['job']} ({d['mode']}), snapshot {d.get('snapshot') or '-'}, "
              f"{human(d.get('bytes') or 0)} sent in {d.get('seconds', 0):.1f} s (run {d.get('run_id')})")
    for ds in d.get("datasets", []):
        base = f" from @{ds['base']}" if ds.get("base") and ds["kind"] != "full" else ""
        con.print(f"  {ds['source']} -> {ds['target']}: {ds['kind']}{base}, {human(ds['bytes'])}"
                  + (f"  [red]{ds['error']}[/]" if ds.get("error") else ""))
    for k, label in (("resumed", "resumed"), ("aborted_tokens", "aborted interrupted receive"),
                     ("pruned_source", "pruned on the source"), ("pruned_target", "pruned on the backup host")):
        if d.get(k):
            con.print(f"  {label}: {', '.join(d[k])}")
    for w in d.get("warnings", []):
        con.print(f"  [yellow]warning:[/] {w}")
    for n in dict.fromkeys(d.get("notes", [])):
        con.print(f"  note: {n}")
    if d.get("error") and not d.get("datasets"):
        con.print(f"  [red]{d['error']}[/]")


# ---------------------------------------------------------------------------------------------
# service: health, notify, metrics, scrub, run, daemon


@app.command()
def health(as_json: JsonOpt = False) -> None:
    """Pool, device, error, scrub, fill and replication checks; exit 0 OK, 1 warning, 2 critical."""
    from . import health as H
    from . import services
    from .zfs.cli import Zpool

    cfg = _config()
    conn = _state(cfg)
    level, findings, sent = services.health_job(cfg, conn, Zpool())
    if as_json:
        _out({"level": H.LEVEL_NAMES[level], "findings": [f.as_dict() for f in findings], "notified": sent})
    elif findings:
        for f in findings:
            print(f.line())
    else:
        print("OK: all watched pools healthy")
    raise typer.Exit(level)


@app.command()
def notify(
    test: Annotated[bool, typer.Option("--test", help="Send a test message to every configured channel.")] = False,
) -> None:
    """Send a test notification (email, webhook, command) to check the settings."""
    import socket

    from .errors import UsageError
    from .notify import Message, channels, send

    cfg = _config()
    if not test:
        raise UsageError("nothing to do: use --test")
    if not channels(cfg.notify):
        raise UsageError("no notification channel configured ([notify.email], [notify.webhook] or notify.command)")
    res = send(cfg.notify, Message(f"[rebal {socket.gethostname()}] test message",
                                   "This is a test of rebal's notifications. Nothing is wrong.", "TEST", {}))
    for ch, r in res.items():
        print(f"{ch}: {r}")
    if any(r != "ok" for r in res.values()):
        raise typer.Exit(1)


@app.command()
def metrics(
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write to this file atomically (textfile collector).")] = None,
) -> None:
    """Prometheus metrics: per-vdev size/alloc/CAP, spread, health, replication, rebalance progress."""
    from . import services
    from .metrics import write_atomic
    from .zfs.cli import Zpool

    cfg = _config()
    text = services.metrics_text(cfg, _state(cfg), Zpool())
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


@app.command()
def scrub(
    pool: Annotated[Optional[str], typer.Argument(help="Pool to scrub.")] = None,
    job: Annotated[Optional[str], typer.Option("--job", help="Scrub the backup host's pool of this job instead.")] = None,
) -> None:
    """Start a scrub of POOL, or of a job's target pool on the backup host (or say one is running)."""
    from .errors import UsageError
    from .zfs.cli import Zpool

    if bool(pool) == bool(job):
        raise UsageError("give a POOL, or --job JOB for the backup host's pool")
    if pool:
        print(f"{pool}: scrub {Zpool().scrub(pool)}")
        return
    from .replicate.job import endpoint, find_job
    from .replicate.restore import _remote_dataset_of
    from .replicate.transport import Ssh

    cfg = _config()
    j = find_job(cfg, job)
    with Ssh(endpoint(j)) as ssh:
        ds = j.target if j.mode == "zfs" else _remote_dataset_of(ssh, j.target)
        if not ds:
            raise UsageError(f"the target of job {job} is not on a ZFS dataset: nothing to scrub")
        target_pool = ds.split("/")[0]
        res = ssh.run(["zpool", "scrub", target_pool], readonly=False, check=False)
        state_ = "started" if res.returncode == 0 else (
            "running" if "scrub" in res.stderr and "progress" in res.stderr or "currently scrubbing" in res.stderr
            else None)
        if state_ is None:
            raise UsageError(f"backup host: {res.stderr.strip()}")
        print(f"{ssh.ep.host}:{target_pool}: scrub {state_}")


# ---------------------------------------------------------------------------------------------
# backups, restore, verify


@app.command()
def backups(job: Annotated[str, typer.Argument(help="Replication job.")], as_json: JsonOpt = False) -> None:
    """The restore points of a job on the backup host: snapshots with times and sizes."""
    from .replicate.job import endpoint, find_job
    from .replicate.restore import points
    from .replicate.transport import Ssh
    from .units import human

    cfg = _config()
    j = find_job(cfg, job)
    with Ssh(endpoint(j)) as ssh:
        ds, pts = points(j, ssh)
    if as_json:
        _out({"job": job, "mode": j.mode, "dataset": ds, "target": j.target, "points": [p.as_dict() for p in pts]})
        return
    print(f"job {job} ({j.mode}): {len(pts)} restore point(s) on {j.target_host}:{ds or j.target}")
    for p in pts:
        d = p.as_dict()
        size = f"{human(p.referenced)} referenced" if p.referenced is not None else "the target directory as it is now"
        print(f"  {p.name:40}  {d['created'] or '':20}  {size}")


@app.command()
def restore(
    job: Annotated[str, typer.Argument(help="Replication job.")],
    to: Annotated[str, typer.Option("--to", help="New dataset (whole restore), or a directory (with --path).")],
    at: Annotated[str, typer.Option("--at", help="Snapshot name, or latest.")] = "latest",
    path: Annotated[Optional[str], typer.Option("--path", help="A file or directory inside the backup, relative to its root.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing destination (even the live source).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be restored; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Get data back: a whole dataset into a NEW dataset, or one file or directory into a directory."""
    import dataclasses
    import signal
    import threading

    from . import state
    from .replicate.job import endpoint, find_job
    from .replicate.restore import choose, points, restore_dataset, restore_path
    from .replicate.transport import Ssh
    from .units import human

    cfg = _config()
    j = find_job(cfg, job)
    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    conn = None if dry_run else _state(cfg)
    rid = None if dry_run else state.start_run(conn, "restore", job=job, pool=None)
    try:
        with Ssh(endpoint(j)) as ssh:
            _ds, pts = points(j, ssh)
            point = choose(pts, at)
            if path:
                rep = restore_path(j, ssh, point, path, to, force=force, dry_run=dry_run, stop=stop)
            else:
                last = [0.0]
                bar = _byte_bar(f"restore {job}@{point.name}") if not (as_json or dry_run) else None

                def progress(nbytes: int) -> None:
                    import time as _t

                    if bar:
                        bar[0].update(bar[1], completed=nbytes)
                    if rid is not None and _t.monotonic() - last[0] >= 0.5:
                        last[0] = _t.monotonic()
                        state.set_progress(cfg.state_db, rid, nbytes)

                try:
                    rep = restore_dataset(j, ssh, point, to, force=force, dry_run=dry_run, stop=stop,
                                          progress=progress)
                finally:
                    if bar:
                        bar[0].__exit__(None, None, None)
    except BaseException as e:
        if rid is not None:
            state.end_run(conn, rid, "failed", error=str(e))
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    d = dataclasses.asdict(rep)
    if rid is not None:
        state.end_run(conn, rid, "ok", details=d)
    if as_json:
        _out(d | {"dry_run": dry_run})
    elif dry_run:
        print(f"dry run: would restore @{rep.point} to {rep.to}")
        for line in rep.planned:
            print(f"  would run: {line}")
    else:
        print(f"restored @{rep.point} of job {job} to {rep.to} ({human(rep.bytes)})")
        for n in rep.notes:
            print(f"  note: {n}")


@app.command()
def verify(
    job: Annotated[str, typer.Argument(help="Replication job.")],
    sample: Annotated[str, typer.Option(help="How many files to hash on both sides, or all.")] = "20",
    seed: Annotated[Optional[int], typer.Option(help="Seed of the random sample (reported, to repeat a check).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check the backup against the source: snapshot guid, file count and size, hashes of a sample.
    Exit 0 good, 1 warning, 2 the backup differs (also a health finding and a notification)."""
    import random as _random

    from . import health as H
    from . import services, state
    from .errors import UsageError
    from .replicate.job import endpoint, find_job
    from .replicate.transport import Ssh
    from .replicate.verify import verify_rsync, verify_zfs

    cfg = _config()
    j = find_job(cfg, job)
    if sample != "all" and not sample.isdigit():
        raise UsageError("--sample takes a number of files or all")
    n = None if sample == "all" else int(sample)
    seed = seed if seed is not None else _random.SystemRandom().randrange(2**31)
    conn = _state(cfg)
    rid = state.start_run(conn, "verify", job=job)
    try:
        with Ssh(endpoint(j)) as ssh:
            if j.mode == "zfs":
                rep = verify_zfs(j, ssh, n, seed)
            else:
                row = conn.execute("SELECT details FROM runs WHERE kind = 'replicate' AND job = ? AND outcome IN "
                                   "('ok', 'warning') ORDER BY id DESC LIMIT 1", (job,)).fetchone()
                snap = json.loads(row["details"]).get("snapshot") if row else None
                rep = verify_rsync(j, ssh, n, seed, snap)
    except BaseException as e:
        state.end_run(conn, rid, "error", error=str(e))
        raise
    level = rep.level
    outcome = {H.OK: "ok", H.WARNING: "warning", H.CRITICAL: "failed"}[level]
    state.end_run(conn, rid, outcome, details=rep.as_dict())
    services.notify_outcome(cfg, conn, f"verify:{job}", outcome, "; ".join(f.message for f in rep.findings) or None)
    if as_json:
        _out(rep.as_dict() | {"level": H.LEVEL_NAMES[level]})
    else:
        print(f"{H.LEVEL_NAMES[level]}: job {job}, snapshot @{rep.snapshot or '-'}, files "
              f"{rep.files[0] if rep.files else '-'} / {rep.files[1] if rep.files else '-'} (source / backup), "
              f"{len(rep.sample)} hashed (seed {rep.seed})")
        for f in rep.findings:
            print(f.line())
        for note in rep.notes:
            print(f"  note: {note}")
    raise typer.Exit(level)


@app.command("run")
def run_cmd(
    job: Annotated[Optional[str], typer.Argument(help="fill, health, scrub, rebalance, or a replication job.")] = None,
    due: Annotated[bool, typer.Option("--due", help="Run every job whose schedule says it is due.")] = False,
) -> None:
    """Run scheduled jobs once (for systemd timers): one by name, or all that are due."""
    import signal
    import threading

    from . import scheduler, state
    from .errors import UsageError

    cfg = _config(check_cron=True)
    _log_for_service()
    if bool(job) == due:
        raise UsageError("give a job name or --due (not both)")
    names_ = scheduler.due(cfg, state.connect(cfg.state_db)) if due else [job]
    if due and not names_:
        log.info("nothing is due")
    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    failed = 0
    try:
        for n in names_:
            if stop.is_set():
                break
            failed += scheduler.run_one(cfg, n, stop) == "failed"
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if failed:
        raise typer.Exit(1)


@app.command()
def daemon() -> None:
    """Run the scheduler (APScheduler) in the foreground until SIGTERM; for rebal.service."""
    from . import scheduler

    cfg = _config(check_cron=True)
    _log_for_service()
    raise typer.Exit(scheduler.daemon(cfg))


def _log_for_service() -> None:
    """Lines journald reads well: LEVEL logger: message (journald adds the time)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(h)
    root.setLevel(logging.DEBUG if OPTS.debug else logging.INFO)


# ---------------------------------------------------------------------------------------------
# config check


@config_app.command("check")
def config_check(
    file: Annotated[Optional[str], typer.Argument(help="File to check [default: the --config file].")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a config file: one line per problem, naming the key and the file; exit 2 if any."""
    from . import config
    from .errors import ConfigError

    path = file or config.config_path(OPTS.config)[0]
    try:
        cfg = config.load(path, check_cron=True)
    except ConfigError as e:
        if as_json:
            _out({"file": path, "ok": False, "problems": e.problems})
        raise
    if as_json:
        _out({"file": path, "ok": True, "problems": [], "jobs": [j.name for j in cfg.replicate], "state_db": cfg.state_db})
        return
    print(f"{path}: OK ({len(cfg.replicate)} replication job(s), state database {cfg.state_db})")


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; turn RebalError into one line on stderr and its exit code."""
    try:
        app(args=argv, prog_name="rebal", standalone_mode=True)
    except RebalError as e:
        if OPTS.debug:
            import traceback

            traceback.print_exc()
        for line in str(e).splitlines() or [type(e).__name__]:
            print(f"rebal: error: {line}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("rebal: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # a bug: say so plainly, traceback only with --debug
        if OPTS.debug or os.environ.get("REBAL_DEBUG"):
            raise
        print(f"rebal: internal error: {type(e).__name__}: {e} (run with --debug for details)", file=sys.stderr)
        sys.exit(70)


if __name__ == "__main__":
    main()
