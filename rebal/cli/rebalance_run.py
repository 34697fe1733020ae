"""The body of `rebal rebalance`, without typer: typer's command (rebalance_cmd.py) and the fast path
(fast.py, a plain command line parsed without typer) both call `run` with the same keywords."""

from __future__ import annotations

import json
import os

from .io import Signals, choice, load_config, open_state, out_json, out_text, state_or_none

METHODS = ("auto", "copy", "rewrite")
PLACEMENTS = ("auto", "measured", "model")


def run(
    targets: list[str],
    target_spread: float | None = None,
    max_bytes: str | None = None,
    until: str | None = None,
    max_rate: str | None = None,
    verify: str | None = None,
    method: str | None = None,
    jobs: int | None = None,
    exclude: list[str] | None = None,
    min_age: float | None = None,
    min_size: str | None = None,
    max_size: str | None = None,
    allow_snapshots: bool = False,
    max_growth: str | None = None,
    hardlinks: bool = False,
    rewrite_all: bool = False,
    placement: str = "auto",
    dry_run: bool = False,
    as_json: bool = False,
) -> int:
    """Rewrite files so ZFS spreads them over every vdev; the command's exit code (130 after ^C)."""
    from ..errors import UsageError

    cfg = load_config()
    # the state database opens (a new one: created and migrated, its commits waiting on the disk)
    # while the rest of rebal loads (issue 19); its error, if any, is raised where it was before
    opening = _Opening(cfg) if not dry_run and os.geteuid() == 0 else None
    from ..rebalance import engine
    from ..units import parse_size
    from ..views.rebalance import plan_json, plan_text, report_text
    from ..zfs.cli import Zfs, Zpool

    rb = cfg.rebalance
    if jobs is not None and not 1 <= jobs <= 64:
        raise UsageError("--jobs must be between 1 and 64")
    opts = engine.build_options(
        rb, targets, target_spread=target_spread, exclude=exclude, min_age=min_age, min_size=min_size,
        max_size=max_size, max_bytes=max_bytes, max_growth=max_growth, replication_jobs=list(cfg.replicate),
        until=engine.until_epoch(until) if until else None,
        max_rate=parse_size(max_rate) if max_rate else (parse_size(rb.max_rate) if rb.max_rate else None),
        verify=choice("--verify", verify or rb.verify, ("hash", "size", "none")),
        method=choice("--method", method or rb.method, METHODS),
        jobs=jobs or rb.jobs,
        allow_snapshots=allow_snapshots or rb.allow_snapshots,
        rewrite_all=rewrite_all,
        hardlinks=hardlinks or rb.hardlinks,
        placement=choice("--placement", placement, PLACEMENTS),
        listing=not dry_run,
    )
    zpool, zfs = Zpool(), Zfs()
    if dry_run:
        prep = engine.prepare(opts, zpool, zfs, state_or_none(cfg))
        if as_json:
            out_json(plan_json(prep) | {"dry_run": True})
        else:
            out_text(plan_text(prep) + "dry run: nothing was changed\n")
        return 0
    if os.geteuid() != 0:
        raise engine.RefusedError("rebal rebalance runs as root: it must keep every file's owner")
    conn = None if opening is not None else open_state(cfg)
    prep = engine.prepare(opts, zpool, zfs, conn, opening=opening)  # (waits for the opening after its scan)
    if conn is None:
        conn = opening.result()
    engine.check_writable(prep)
    engine.check_pinned(prep, opts)
    with Signals() as sig:
        if as_json:
            from .progress import JsonEvents

            events = JsonEvents()
        else:
            from .progress import ProgressEvents, console

            events = ProgressEvents(prep)
            for w in prep.warnings:
                console(stderr=True).print(f"warning: {w}", markup=False)
        with events:
            report = engine.execute(prep, opts, zpool, zfs, conn, cfg.state_db, events, sig.stop)
    if sig.got:
        import signal

        report.outcome, report.reason = "interrupted", f"stopped by signal {signal.Signals(sig.got[0]).name}"
        conn.execute("UPDATE runs SET outcome = 'interrupted' WHERE id = ?", (report.run_id,))
    if as_json:
        print(json.dumps({"event": "done"} | report.as_dict()), flush=True)
    else:
        out_text(report_text(report))
    return sig.exit_code() if report.outcome == "interrupted" else 0


class _Opening:
    """`open_state(cfg)` on a thread of its own: `result()` gives the connection or raises its error."""

    def __init__(self, cfg) -> None:
        import threading

        self._conn = self._error = None
        self._thread = threading.Thread(target=self._open, args=(cfg,), name="rebal-state", daemon=True)
        self._thread.start()

    def _open(self, cfg) -> None:
        try:
            self._conn = open_state(cfg)
        except BaseException as e:  # noqa: BLE001 - raised again by result(), in the caller's thread
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._conn

    def check(self) -> None:
        """Raise the opening's error now if it has failed already; else wait for nothing."""
        if not self._thread.is_alive() and self._error is not None:
            raise self._error
