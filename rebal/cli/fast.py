"""`rebal status` and `rebal rebalance` without typer. Status is the command people and timers run
most, and a rebalance of a small tree on a fast pool is over in a second or two: typer and click
cost more start-up than that work (in the lane's OpenZFS guest, importing typer and building the
command took 0.5 s of a 4,000-file rewrite's 6-7 s; issue 19). When the command line is exactly
`rebal [--config FILE | -c FILE] status [--json] [POOL...]`, or `rebalance` with targets and only
the well-formed options of the table below, `main` runs it here; anything else (help, another
option, another command, a malformed value) goes to typer, which parses the same command line the
same way (tests hold both to the same output and the same keywords)."""

from __future__ import annotations

import os
import sys


def show_status(pools: list[str], as_json: bool) -> None:
    """The body of `rebal status` (typer's and the fast path's)."""
    from .. import fill, state
    from .io import load_config, open_state, out_json, out_text, warn
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


def _command(argv: list[str]) -> tuple[str | None, int] | None:
    """(config, index of the command name) past a plain `--config FILE`, `-c FILE` or
    `--config=FILE`; None for anything else before the command (--debug, --version, --help)."""
    config = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--config", "-c") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            config = argv[i + 1]
            i += 2
        elif a.startswith("--config=") and len(a) > len("--config="):
            config = a[len("--config="):]
            i += 1
        elif a.startswith("-"):
            return None
        else:
            return config, i
    return None


def parse(argv: list[str]) -> tuple[str | None, list[str], bool] | None:
    """(config, pools, as_json) when ``argv`` is a plain status command line, else None."""
    got = _command(argv)
    if got is None or argv[got[1]] != "status":
        return None
    config, i = got
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


# `rebal rebalance`'s options as typer declares them (rebalance_cmd.py; a test holds the two to the
# same parse): option -> (keyword of rebalance_run.run, kind). Kind None: a flag; list: repeatable.
REBALANCE = {
    "--target-spread": ("target_spread", float), "--max-bytes": ("max_bytes", str), "--until": ("until", str),
    "--max-rate": ("max_rate", str), "--verify": ("verify", str), "--method": ("method", str), "--jobs": ("jobs", int),
    "--exclude": ("exclude", list), "--min-age": ("min_age", float), "--min-size": ("min_size", str),
    "--max-size": ("max_size", str), "--allow-snapshots": ("allow_snapshots", None),
    "--max-growth": ("max_growth", str), "--hardlinks": ("hardlinks", None), "--all": ("rewrite_all", None),
    "--placement": ("placement", str), "--dry-run": ("dry_run", None), "--json": ("as_json", None),
}


def parse_rebalance(argv: list[str]) -> tuple[str | None, list[str], dict] | None:
    """(config, targets, keywords) when ``argv`` is a `rebal rebalance` command line of the options
    above, each well formed; None for anything else (help, an unknown or malformed option, a value
    that looks like an option, `--`, no target), which typer then parses and reports."""
    got = _command(argv)
    if got is None or argv[got[1]] != "rebalance":
        return None
    config, i = got
    targets: list[str] = []
    kw: dict = {}
    rest = argv[i + 1:]
    j = 0
    while j < len(rest):
        a = rest[j]
        j += 1
        if not a.startswith("-"):
            if not a:
                return None
            targets.append(a)
            continue
        name, eq, value = a.partition("=")
        if name not in REBALANCE:
            return None
        key, kind = REBALANCE[name]
        if kind is None:
            if eq:
                return None
            kw[key] = True
            continue
        if not eq:
            if j == len(rest):
                return None
            value = rest[j]
            j += 1
        if not value or value.startswith("-"):
            return None
        if kind is list:
            kw.setdefault(key, []).append(value)
            continue
        try:
            kw[key] = kind(value)
        except ValueError:
            return None
    if not targets:
        return None
    return config, targets, kw


def try_fast(argv: list[str]) -> bool:
    """Run ``argv`` here if it is a plain status or rebalance command line; False to leave it to typer."""
    if os.environ.get("REBAL_NO_FAST") or any(k.startswith("_REBAL_COMPLETE") for k in os.environ):
        return False
    got = parse(argv)
    if got is not None:
        from .io import OPTS, guarded

        OPTS.config, pools, as_json = got
        _logging()
        guarded(lambda: show_status(pools, as_json))
        return True
    reb = parse_rebalance(argv)
    if reb is None:
        return False
    config, targets, kw = reb
    from .. import early

    try:
        start_queries(targets, kw.get("method"))
    except Exception:  # only a head start: anything odd here is left to prepare, which reports it
        early.drop()
    try:
        from .io import OPTS, guarded

        OPTS.config = config
        _logging_when_loaded()
        from .rebalance_run import run

        code = [0]
        guarded(lambda: code.__setitem__(0, run(targets, **kw)))
    finally:
        early.drop()
    if code[0]:
        sys.exit(code[0])
    return True


def start_queries(targets: list[str], method: str | None) -> bool:
    """Start the pool's first queries (`rebal.early`) when the targets name one pool by the mount
    table or by dataset name alone; else (zfs-fuse, a snapshot, a bad name) leave every query to
    `prepare`, which then says what is wrong. True when they were started."""
    from .. import early
    from ..errors import UsageError
    from ..zfs import queries

    datasets = []
    for spec in targets:
        if spec.startswith(("/", ".")):
            found = queries.dataset_of(spec)
            if found is None:
                return False
            datasets.append(found[0])
        else:
            datasets.append(spec)
    pools = {d.split("/")[0] for d in datasets}
    if len(pools) != 1:
        return False
    try:
        argvs = queries.first(pools.pop(), datasets, rewrite=method != "copy")
    except UsageError:
        return False
    early.start(argvs)
    return True


def _logging() -> None:
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _logging_when_loaded() -> None:
    """`_logging`, made the moment `logging` is first imported, if ever: a `zfs rewrite` rebalance
    imports neither it nor concurrent.futures (rebal/tasks.py; about 75 ms of its start in the lane's
    guest, issue 19), and a run that logs (the copy path, a warning of a module) writes its records
    as every other command does."""
    if "logging" in sys.modules:
        _logging()
    elif not any(isinstance(f, _SetUpLogging) for f in sys.meta_path):
        sys.meta_path.insert(0, _SetUpLogging())


class _SetUpLogging:
    """An import hook for `logging` alone: finds it as the others would, and once its module has run,
    sets it up (`_logging`); then leaves the import machinery."""

    def find_spec(self, name, path=None, target=None):
        if name != "logging":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module) -> None:
            run(module)
            module.basicConfig(level=module.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec
