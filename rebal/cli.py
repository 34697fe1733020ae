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
    try:
        conn = _state(cfg)
        for p in found:
            state.record_sample(conn, p)
        conn.close()
    except RebalError as e:
        _warn(f"sample not recorded: {e}")
    if as_json:
        _out({"pools": [fill.pool_json(p, target) for p in found]})
        return
    if not found:
        print("no pools imported")
        return
    _render_status(found, target)


def _render_status(pools, target: float) -> None:
    from rich.table import Table

    from . import fill
    from .units import human

    con = _console()
    for p in pools:
        over = p.spread > target
        verdict = f"[bold red]over target {target:g}[/]" if over else f"[green]within target {target:g}[/]"
        con.print(f"[bold]{p.name}[/]  {p.health}  size {human(p.size)}  alloc {human(p.alloc)}  "
                  f"free {human(p.free)}  CAP {p.cap:.0f}%")
        con.print(f"spread [bold]{p.spread:.1f}[/] points ({verdict})")
        short = fill.short_names([v.name for v in p.vdevs])
        t = Table(box=None, pad_edge=False, show_edge=False)
        for col, just in (("VDEV", "left"), ("TYPE", "left"), ("SIZE", "right"), ("ALLOC", "right"),
                          ("FREE", "right"), ("CAP", "right"), ("", "left")):
            t.add_column(col, justify=just)
        for v in p.data_vdevs:
            t.add_row(short[v.name], v.type, human(v.size), human(v.alloc), human(v.free), f"{v.cap:.1f}%", fill.bar(v.cap))
        for v in p.other_vdevs:
            t.add_row(f"[dim]{short[v.name]}[/]", f"[dim]{v.vclass}[/]", "", "", "", "", "[dim]not counted[/]")
        con.print(t)
        if any(not v.exact for v in p.data_vdevs):
            con.print("[dim]figures from 'zpool iostat -v' are rounded to 3 digits[/]")
        con.print()


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
# config check


@config_app.command("check")
def config_check(
    file: Annotated[Optional[str], typer.Argument(help="File to check [default: the --config file].")] = None,
) -> None:
    """Validate a config file: one line per problem, naming the key and the file; exit 2 if any."""
    from . import config

    path = file or config.config_path(OPTS.config)[0]
    cfg = config.load(path, check_cron=True)
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
