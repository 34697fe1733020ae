"""rebal health, notify, metrics, scrub, run, daemon: the commands of unattended operation."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from . import complete
from .app import JsonOpt, app, log, log_for_service
from .io import Signals, load_config, open_state, out_json, out_text


@app.command()
def health(as_json: JsonOpt = False) -> None:
    """Pool, device, error, scrub, fill and replication checks; exit 0 OK, 1 warning, 2 critical."""
    from .. import health as H
    from .. import jobs
    from ..zfs.cli import Zpool

    cfg = load_config()
    level, findings, sent = jobs.health_job(cfg, open_state(cfg), Zpool())
    if as_json:
        out_json({"level": H.LEVEL_NAMES[level], "findings": [f.as_dict() for f in findings], "notified": sent})
    elif findings:
        out_text("".join(f.line() + "\n" for f in findings))
    else:
        out_text("OK: all watched pools healthy\n")
    raise typer.Exit(level)


@app.command()
def notify(
    test: Annotated[bool, typer.Option("--test", help="Send a test message to every configured channel.")] = False,
) -> None:
    """Send a test notification (email, webhook, command) to check the settings."""
    import socket

    from ..errors import UsageError
    from ..notify import Message, channels, send

    cfg = load_config()
    if not test:
        raise UsageError("nothing to do: use --test")
    if not channels(cfg.notify):
        raise UsageError("no notification channel configured ([notify.email], [notify.webhook] or notify.command)")
    res = send(cfg.notify, Message(f"[rebal {socket.gethostname()}] test message",
                                   "This is a test of rebal's notifications. Nothing is wrong.", "TEST", {}))
    out_text("".join(f"{ch}: {r}\n" for ch, r in res.items()))
    if any(r != "ok" for r in res.values()):
        raise typer.Exit(1)


@app.command()
def metrics(
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write to this file atomically (textfile collector).")] = None,
) -> None:
    """Prometheus metrics: per-vdev size/alloc/CAP, spread, health, replication, rebalance progress."""
    from .. import jobs
    from ..metrics import write_atomic
    from ..zfs.cli import Zpool

    cfg = load_config()
    text = jobs.metrics_text(cfg, open_state(cfg), Zpool())
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


@app.command()
def scrub(
    pool: Annotated[Optional[str], typer.Argument(help="Pool to scrub.", autocompletion=complete.pools)] = None,
    job: Annotated[Optional[str], typer.Option("--job", help="Scrub the backup host's pool of this job instead.", autocompletion=complete.replication_jobs)] = None,
) -> None:
    """Start a scrub of POOL, or of a job's target pool on the backup host (or say one is running)."""
    from ..errors import UsageError

    if bool(pool) == bool(job):
        raise UsageError("give a POOL, or --job JOB for the backup host's pool")
    if pool:
        from ..zfs.cli import Zpool

        out_text(f"{pool}: scrub {Zpool().scrub(pool)}\n")
        return
    from ..replicate.backups import scrub_backup

    host, target_pool, what = scrub_backup(load_config(), job)
    out_text(f"{host}:{target_pool}: scrub {what}\n")


@app.command("run")
def run_cmd(
    job: Annotated[Optional[str], typer.Argument(help="fill, health, scrub, rebalance, metrics, or a replication job.", autocompletion=complete.jobs)] = None,
    due: Annotated[bool, typer.Option("--due", help="Run every job whose schedule says it is due.")] = False,
) -> None:
    """Run scheduled jobs once (for systemd timers): one by name, or all that are due."""
    from .. import scheduler, state
    from ..errors import UsageError

    cfg = load_config(check_cron=True)
    log_for_service()
    if bool(job) == due:
        raise UsageError("give a job name or --due (not both)")
    names_ = scheduler.due(cfg, state.connect(cfg.state_db)) if due else [job]
    if due and not names_:
        log.info("nothing is due")
    failed = 0
    with Signals() as sig:
        for n in names_:
            if sig.stop.is_set():
                break
            failed += scheduler.run_one(cfg, n, sig.stop) == "failed"
    if failed:
        raise typer.Exit(1)


@app.command()
def daemon() -> None:
    """Run the scheduler (APScheduler) in the foreground until SIGTERM; for rebal.service."""
    from .. import scheduler

    cfg = load_config(check_cron=True)
    log_for_service()
    code = scheduler.daemon(cfg)
    if code == scheduler.RESTART:  # (SIGHUP, e.g. a package upgrade: no job was running) the same command, anew
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "rebal", *sys.argv[1:]])
    raise typer.Exit(code)
