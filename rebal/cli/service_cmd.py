"""rebal health, notify, metrics, scrub, run, daemon: the commands of unattended operation."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from . import complete
from .app import JsonOpt, app, log, log_for_service
from .io import Signals, load_config, open_state, out_json, out_text
from ..outcome import Outcome


@app.command()
def health(as_json: JsonOpt = False) -> None:
    """Pool, device, error, scrub, fill and replication checks; exit 0 OK, 1 warning, 2 critical."""
    from .. import health as H
    from .. import jobs
    from ..zfs.host import ZfsHost

    cfg = load_config()
    checked: list = []
    level, findings, sent = jobs.health_job(cfg, open_state(cfg), ZfsHost.here(), checked=checked)
    if as_json:
        out_json({"level": H.LEVEL_NAMES[level], "findings": [f.as_dict() for f in findings], "notified": sent,
                  "checked": checked})
        raise typer.Exit(level)
    out = [f.line() for f in findings] or ["OK: every check passed"]
    out.append("checked:")  # what was looked at, so an OK says what it covers
    for c in checked:
        if "pool" in c:
            out.append(f"  pool {c['pool']}: {c['health']}, CAP {c['cap']:.1f}%, spread {c['spread']:.1f} points over "
                       f"{c['vdevs']} data vdev(s); devices, errors, scrub age, ashift")
        else:
            age = "never succeeded" if c["age_hours"] is None else f"last success {c['age_hours']:.1f} h ago"
            out.append(f"  replication job {c['job']} ({c['mode']}): {age}; snapshot ages, verify, last run")
    out_text("\n".join(out) + "\n")
    raise typer.Exit(level)


@app.command()
def notify(
    test: Annotated[bool, typer.Option("--test", help="Send a test message to every configured channel.")] = False,
    as_json: JsonOpt = False,
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
    if as_json:
        out_json({"channels": res, "ok": all(r == Outcome.OK for r in res.values())})
    else:
        out_text("".join(f"{ch}: {r}\n" for ch, r in res.items()))
    if any(r != Outcome.OK for r in res.values()):
        raise typer.Exit(1)


@app.command()
def metrics(
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Write to this file atomically (textfile collector).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The samples as JSON (name, labels, value) instead of Prometheus text.")] = False,
) -> None:
    """Prometheus metrics: per-vdev size/alloc/CAP, spread, health, replication, rebalance progress."""
    from contextlib import nullcontext

    from .. import jobs
    from ..metrics import atomic_file
    from ..zfs.host import ZfsHost

    cfg = load_config()
    with atomic_file(output) if output else nullcontext() as put:  # a place it cannot write: said first
        doc = jobs.metrics_doc(cfg, open_state(cfg), ZfsHost.here())
        text = "\n".join(doc.lines) + "\n"
        if put is not None:
            put(text)
    if as_json:
        out_json({"file": output, "samples": doc.samples})
    elif not output:
        sys.stdout.write(text)


@app.command()
def scrub(
    pool: Annotated[Optional[str], typer.Argument(help="Pool to scrub.", autocompletion=complete.pools)] = None,
    job: Annotated[Optional[str], typer.Option("--job", help="Scrub the backup host's pool of this job instead.", autocompletion=complete.replication_jobs)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a scrub of POOL, or of a job's target pool on the backup host (or say one is running)."""
    from ..errors import UsageError

    if bool(pool) == bool(job):
        raise UsageError("give a POOL, or --job JOB for the backup host's pool")
    if pool:
        from ..zfs.host import ZfsHost

        what = "running" if ZfsHost.here().scrub(pool) == "running" else "started"
        out_json({"pool": pool, "host": None, "scrub": what}) if as_json else out_text(f"{pool}: scrub {what}\n")
        return
    from ..recover.backups import scrub_backup

    assert job  # (one of the two, said above)
    host, target_pool, what = scrub_backup(load_config(), job)
    if as_json:
        out_json({"pool": target_pool, "host": host, "scrub": what})
    else:
        out_text(f"{host}:{target_pool}: scrub {what}\n")


@app.command("run")
def run_cmd(
    job: Annotated[Optional[str], typer.Argument(help="fill, health, scrub, rebalance, metrics, or a replication job.", autocompletion=complete.jobs)] = None,
    due: Annotated[bool, typer.Option("--due", help="Run every job whose schedule says it is due.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say which jobs would run; run none.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The jobs and their outcomes as JSON on stdout (the log stays on stderr).")] = False,
) -> None:
    """Run scheduled jobs once (for systemd timers): one by name, or all that are due."""
    from .. import scheduler, state
    from ..errors import UsageError

    cfg = load_config(check_cron=True)
    log_for_service()
    if bool(job) == due:
        raise UsageError("give a job name or --due (not both)")
    if job and job not in scheduler.all_jobs(cfg):
        raise UsageError(f"no job named {job!r} (jobs: {', '.join(scheduler.all_jobs(cfg))})")
    names_ = scheduler.due(cfg, state.connect(cfg.state_db)) if due or not job else [job]
    if dry_run:
        if as_json:
            out_json({"due" if due else "jobs": names_, "dry_run": True})
        else:
            out_text("".join(f"would run: {n}\n" for n in names_) or "nothing is due\n")
        return
    if due and not names_:
        log.info("nothing is due")
    outcomes: dict[str, str] = {}
    with Signals() as sig:
        for n in names_:
            if sig.stop.is_set():
                break
            outcomes[n] = scheduler.run_one(cfg, n, sig.stop)
    failed = sum(o == Outcome.FAILED for o in outcomes.values())
    if as_json:
        out_json({"jobs": [{"job": n, "outcome": o} for n, o in outcomes.items()], "failed": failed})
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
    raise typer.Exit(int(code))


@app.command()
def watch(
    root: Annotated[Optional[list[str]], typer.Option("--root", metavar="DATASET", help="Watch the datasets under DATASET (repeatable) [default: the roots of the gated keys].")] = None,
    authorized_keys: Annotated[Optional[list[str]], typer.Option("--authorized-keys", metavar="FILE", help="Read the gated keys' roots (rebal gate --receive-into ROOT) from FILE (repeatable) [default: ~/.ssh/authorized_keys].")] = None,
    max_age_hours: Annotated[Optional[float], typer.Option("--max-age-hours", metavar="H", help="A dataset whose newest snapshot is older is a warning [default: health.replication_max_age_hours].")] = None,
    gate_log: Annotated[Optional[list[str]], typer.Option("--gate-log", metavar="FILE", help="The gate's log file (repeatable) [default: /var/log/rebal/gate.log; the journal too].")] = None,
    metrics_file: Annotated[Optional[str], typer.Option("--metrics", metavar="FILE", help="Also write the figures for node_exporter's textfile collector to FILE.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """On a backup host: every backup under the gated roots, its newest snapshot's age, the pools that
    hold them, and the gate's refusals since the last watch; exit 0 OK, 1 warning, 2 critical. Needs no
    config from the file servers."""
    import os

    from .. import health as H
    from .. import watch as W
    from ..errors import UsageError
    from ..gate.serve import FALLBACK_LOG
    from ..state import Cache
    from ..zfs.host import ZfsHost

    cfg = load_config()
    roots = [W.Root(r, "--root") for r in root or []]
    for r in roots:
        if problem := W.names.dataset_problem(r.dataset):
            raise UsageError(f"--root {r.dataset}: {problem}")
    for f in authorized_keys or ([] if root else [os.path.expanduser("~/.ssh/authorized_keys")]):
        try:
            with open(f, errors="replace") as fh:  # (a key file is text; a stray byte must not stop the watch)
                roots += W.gated_roots(fh.read(), f)
        except OSError as e:
            raise UsageError(f"--authorized-keys {f}: {e.strerror}") from None
    if not roots:
        raise UsageError("nothing to watch: no gated key (rebal gate --receive-into ROOT) in the authorized_keys "
                         "read, and no --root")
    now = W.now()

    host = ZfsHost.here()
    for r in roots:
        r.datasets, r.failed_over = host.newest_snapshots(r.dataset)
    limit = max_age_hours or cfg.health.replication_max_age_hours
    findings = W.age_findings(roots, limit, now)
    pools = sorted({r.dataset.split("/")[0] for r in roots})
    found = {p.name: p for p in host.pools()}
    statuses = {s.name: s for s in host.status()}
    for p in pools:
        if p not in found or p not in statuses:
            continue  # (its roots said so: not there)
        findings += H.pool_findings(statuses[p], found[p], cap_warning=cfg.health.cap_warning,
                                    cap_critical=cfg.health.cap_critical, target_spread=100.0,
                                    scrub_max_age_days=cfg.health.scrub_max_age_days, now=now)
    conn = open_state(cfg)
    cache = Cache(conn, max_age=float("inf"))
    since = float(cache.get("watch.last") or now - 86400)
    files = gate_log or [FALLBACK_LOG]
    refused = W.refusals(W.gate_log_lines(files, since), since)
    findings += W.refusal_findings(refused)
    cache.set("watch.last", str(now))
    level = H.overall(findings)
    if metrics_file:
        from ..metrics import atomic_file

        with atomic_file(metrics_file) as put:
            put(W.metrics_text(roots, level, len(refused), limit, now))
    watched: list[dict[str, Any]] = [{"root": r.dataset, "key": r.key, "datasets": len(r.datasets),
                "newest": {d: (None if p is None else {"snapshot": p[0], "age_hours": round((now - p[1]) / 3600, 2)})
                           for d, p in r.datasets.items()}} for r in roots]
    if as_json:
        out_json({"level": H.LEVEL_NAMES[level], "findings": [f.as_dict() for f in findings], "roots": watched,
                  "refused": len(refused), "max_age_hours": limit})
        raise typer.Exit(level)
    out = [f.line() for f in findings] or ["OK: every backup is fresh, its pool healthy, nothing refused"]
    out.append("watched:")
    for w in watched:
        ages = [v["age_hours"] for v in w["newest"].values() if v]
        out.append(f"  {w['root']}" + (f" ({w['key']})" if w["key"] else "") + f": {w['datasets']} dataset(s)"
                   + (f", newest snapshot {min(ages):.1f} h old, oldest newest {max(ages):.1f} h" if ages else ""))
    out.append(f"  pools {', '.join(pools)}; gate refusals since the last watch: {len(refused)}")
    out_text("\n".join(out) + "\n")
    raise typer.Exit(level)
