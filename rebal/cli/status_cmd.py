"""rebal status, rebal history."""

from __future__ import annotations

from contextlib import closing
from typing import Annotated, Optional

import typer

from . import complete
from .app import JsonOpt, app
from ..errors import NoSuchPool, RebalError
from .io import load_config, open_state, out_json, out_text, warn


@app.command()
def status(
    pools: Annotated[Optional[list[str]], typer.Argument(help="Pools to show [default: config 'pools', else all].", autocompletion=complete.pools)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Fill of every data vdev (size, alloc, free, CAP) and the pool's spread; records a sample."""
    from .. import fill, state
    from ..errors import RebalError
    from ..health import sector_findings
    from ..jobs import rebalance_findings, sector_mismatches
    from ..zfs.host import ZfsHost

    cfg = load_config()
    host = ZfsHost.here()
    found = host.pools(list(pools or cfg.pools))
    target = cfg.rebalance.target_spread
    replication: list[dict] = []
    waiting: list[dict] = []
    try:
        with closing(open_state(cfg)) as conn:
            for p in found:
                state.record_sample(conn, p)
            if cfg.replicate:
                replication = state.last_successes(conn, cfg)
            waiting = [f.as_dict() for f in rebalance_findings(conn, host)]
    except RebalError as e:
        warn(f"sample not recorded: {e}")
    sectors = [f.as_dict() for p in found for f in sector_findings(p.name, sector_mismatches(p.name, host))]
    if as_json:
        out_json({"pools": [fill.pool_json(p, target) for p in found], "replication": replication,
                  "rebalance": waiting, "sectors": sectors})
        return
    from ..views.status import status_text

    out_text(status_text(found, target, replication)
             + "".join(f"{w['subject']}: {w['message']}\n" for w in waiting + sectors))


@app.command()
def history(
    pool: Annotated[str, typer.Argument(help="Pool name.", autocompletion=complete.pools)],
    since: Annotated[Optional[str], typer.Option(help="Only samples newer than this: 7d, 12h, or a date.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per-vdev CAP over time, from the samples that status and the daemon record."""
    from .. import fill, names, state

    names.pool(pool)
    cfg = load_config()
    conn = open_state(cfg)
    rows = state.samples(conn, pool, fill.parse_since(since) if since else None)
    if not rows and not state.samples(conn, pool, None):
        from ..zfs.host import ZfsHost

        try:
            pools = ZfsHost.here().pool_names()
        except RebalError:  # no ZFS answering here: nothing says the pool exists
            pools = []
        if pool not in pools:  # never sampled and not here: a typo, or a pool of another machine
            raise NoSuchPool(f"no such pool: {pool} (no samples recorded; imported pools: {', '.join(pools) or 'none'})")
    if as_json:
        out_json(fill.history_json(pool, rows))
        return
    from ..views.status import history_text

    out_text(history_text(pool, rows))


@app.command()
def where(
    paths: Annotated[list[str], typer.Argument(help="Files or directories on one pool.")],
    sample: Annotated[int, typer.Option(min=1, help="Measure at most this many files (a random sample) of a big tree.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the sample.")] = 0,
    time_limit: Annotated[float, typer.Option("--time-limit", min=1, help="Stop measuring after this many seconds.")] = 60.0,
    read: Annotated[bool, typer.Option("--read", help="Read a sample of the files and say which vdevs served the reads, and how fast (zpool iostat per second).")] = False,
    read_bytes: Annotated[str, typer.Option("--read-bytes", metavar="SIZE", help="With --read: read about this much.")] = "1G",
    as_json: JsonOpt = False,
) -> None:
    """Where data lives: the share of the paths' allocated bytes on each data vdev, read from the
    block pointers with zdb (a sample of a big tree, with a 95% interval). --read: the share of the
    reads each vdev serves, and the throughput, measured while reading a sample."""
    from ..where import where as measure
    from ..zfs.host import ZfsHost

    if read:
        from ..readspeed import measure_read
        from ..units import parse_size

        got = measure_read(paths, ZfsHost.here(), budget=parse_size(read_bytes), seed=seed)
        if as_json:
            out_json(got.as_dict())
        else:
            from ..views.where import read_text

            out_text(read_text(got))
        return
    rep = measure(paths, ZfsHost.here(), sample=sample, seed=seed, time_limit=time_limit)
    if as_json:
        out_json(rep.as_dict())
        return
    from ..views.where import where_text

    out_text(where_text(rep))
