"""What runs when: the daemon (APScheduler) and the one-shot "run what is due" for systemd timers.

Jobs: `fill`, `health`, `scrub`, `rebalance`, `metrics`, and one per `[[replicate]]` job (by its
name). Each run is recorded in SQLite; a job never runs twice at once (max_instances=1 in the
daemon, a lock per run otherwise); missed runs are coalesced into one within a grace time.
"""

from __future__ import annotations

import sqlite3

import json
import logging
import signal
import threading
from datetime import datetime, timedelta, timezone
from types import FrameType
from typing import TYPE_CHECKING

from . import jobs, state
from .config import Config, cron_trigger
from .errors import RebalError, UsageError
from .notify import notify_outcome
from .outcome import Outcome

if TYPE_CHECKING:
    from .zfs.host import ZfsHost

log = logging.getLogger(__name__)
BUILTIN = ("fill", "health", "scrub", "rebalance", "refresh", "metrics")
GRACE = 600  # seconds a missed run may still start late


def schedules(cfg: Config) -> dict[str, str]:
    """Job name -> cron expression, for every job that has a schedule."""
    out = {}
    for name in BUILTIN:
        expr = getattr(cfg.schedule, name)
        if expr:
            out[name] = expr
    for j in cfg.replicate:
        if j.schedule:
            if j.name in BUILTIN:
                raise UsageError(f"replication job name {j.name!r} clashes with a built-in job")
            out[j.name] = j.schedule
    return out


def all_jobs(cfg: Config) -> list[str]:
    return list(BUILTIN) + [j.name for j in cfg.replicate]


def last_start(conn: sqlite3.Connection, job: str, cfg: Config) -> float | None:
    if cfg.job(job) is not None:
        return state.last_started(conn, "replicate", job)
    return state.last_started(conn, job)


def due(cfg: Config, conn: sqlite3.Connection, now: datetime | None = None) -> list[str]:
    """Jobs whose schedule fired since their last recorded start (or within a day, if never run)."""
    now = now or datetime.now(timezone.utc)
    out = []
    for job, expr in schedules(cfg).items():
        trig = cron_trigger(expr, timezone=timezone.utc)
        last = last_start(conn, job, cfg)
        since = datetime.fromtimestamp(last, timezone.utc) + timedelta(seconds=1) if last else now - timedelta(days=1)
        fire = trig.get_next_fire_time(None, since)
        if fire is not None and fire <= now:
            out.append(job)
    return out


def run_one(cfg: Config, name: str, stop: threading.Event | None = None) -> str:
    """Run one job now; returns its outcome. Records the run; notifies on failure."""
    from .zfs.host import ZfsHost

    stop = stop or threading.Event()
    conn = state.connect(cfg.state_db)
    host = ZfsHost.here()
    jlog = logging.getLogger(f"rebal.job.{name}")
    jlog.info("start")
    try:
        if cfg.job(name) is not None:
            from .replicate.job import run_job

            outcome, details = run_job(cfg, name, stop=stop, conn=conn, on_wait=jlog.info)
            notify_outcome(cfg.notify, conn, f"job:{name}", outcome, details.get("error"))
            jlog.log(logging.ERROR if outcome == Outcome.FAILED else logging.INFO, "%s: %s bytes%s", outcome,
                     details.get("bytes"), f" ({details['error']})" if details.get("error") else "")
            if outcome in (Outcome.OK, Outcome.WARNING) and cfg.schedule.rebalance_after == name and not stop.is_set():
                # chained: the rebalance's copies go out whole with the next run of this job
                jlog.info("its replication landed: the chained rebalance runs now (schedule.rebalance_after)")
                if run_one(cfg, "rebalance", stop) == Outcome.FAILED:
                    return Outcome.FAILED  # the unit (timer mode) fails: the chained part did not do its job
            return outcome
        if name == "fill":
            res = jobs.record(conn, "fill", lambda: jobs.fill_job(cfg, conn, host))
        elif name == "health":
            res = jobs.record(conn, "health", lambda: _health(cfg, conn, host))
        elif name == "scrub":
            res = jobs.record(conn, "scrub", lambda: jobs.scrub_job(cfg, conn, host))
        elif name == "metrics":
            res = jobs.record(conn, "metrics", lambda: jobs.metrics_job(cfg, conn, host))
        elif name == "refresh":
            res = jobs.record(conn, "refresh", lambda: jobs.refresh_job(cfg, conn, host, stop))
            outcome = res.get("outcome", Outcome.OK)
            if outcome in (Outcome.FAILED, Outcome.INTERRUPTED):
                jlog.error("%s: %s", outcome, res.get("reason"))
                notify_outcome(cfg.notify, conn, "job:refresh", Outcome.FAILED, res.get("reason"))
                return Outcome.FAILED
            jlog.info("%s: %s", outcome, res.get("reason") or res.get("skipped"))
            notify_outcome(cfg.notify, conn, "job:refresh", Outcome.OK, None)
            return Outcome.OK
        elif name == "rebalance":
            res = jobs.rebalance_job(cfg, conn, host, stop, on_wait=jlog.info)
            outcome = res.get("outcome", Outcome.OK)
            if outcome in (Outcome.FAILED, Outcome.INTERRUPTED):
                jlog.error("%s: %s (run %s)", outcome, res.get("reason"), res.get("run_id"))
                notify_outcome(cfg.notify, conn, "job:rebalance", Outcome.FAILED, res.get("reason"))
                return Outcome.FAILED
            jlog.info("%s: %s; %s files, %s bytes rewritten, spread %s -> %s (run %s)", outcome, res.get("reason"),
                      res.get("files"), res.get("bytes"), res.get("spread_before"), res.get("spread_after"),
                      res.get("run_id"))
            notify_outcome(cfg.notify, conn, "job:rebalance", Outcome.OK, None)
            return outcome
        else:
            raise UsageError(f"no job named {name!r} (jobs: {', '.join(all_jobs(cfg))})")
        jlog.info("ok: %s", json.dumps(res, default=str))
        return Outcome.OK
    except UsageError:
        raise
    except RebalError as e:
        jlog.error("failed: %s", e)
        notify_outcome(cfg.notify, conn, f"job:{name}", Outcome.FAILED, str(e))
        return Outcome.FAILED
    except Exception as e:  # a bug: this job failed, the others still run; its traceback with --debug
        jlog.error("failed: internal error: %s: %s", type(e).__name__, e, exc_info=jlog.isEnabledFor(logging.DEBUG))
        notify_outcome(cfg.notify, conn, f"job:{name}", Outcome.FAILED, f"internal error: {type(e).__name__}: {e}")
        return Outcome.FAILED
    finally:
        conn.close()


def _health(cfg: Config, conn: sqlite3.Connection, host: ZfsHost) -> dict:
    level, findings, sent = jobs.health_job(cfg, conn, host)
    for f in findings:
        logging.getLogger("rebal.job.health").log(
            logging.ERROR if f.level == 2 else logging.WARNING, "%s", f.line())
    return {"level": level, "findings": [f.as_dict() for f in findings], "sent": sent}


RESTART = "restart"


def daemon(cfg: Config, stop: threading.Event | None = None) -> int | str:
    """Run the scheduler until SIGTERM/SIGINT (a running job ends at a safe point; 0), or until a
    SIGHUP finds no job running (RESTART: the caller starts the daemon afresh, with the installed
    version and the config as they are now; a running job is never cut for it)."""
    from apscheduler.schedulers.background import BackgroundScheduler

    stop = stop or threading.Event()
    restart = threading.Event()
    running = _Running()
    sched = BackgroundScheduler(timezone=datetime.now().astimezone().tzinfo,
                                job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": GRACE})
    jobs = schedules(cfg)
    for name, expr in jobs.items():
        sched.add_job(_safe_run, cron_trigger(expr, timezone=sched.timezone), args=(cfg, name, stop, running),
                      id=name, name=name)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping after the running steps reach a safe point", signal.Signals(signum).name)
        stop.set()

    def on_hup(_signum: int, _frame: FrameType | None) -> None:
        log.info("SIGHUP: restarting once no job is running (the jobs due meanwhile wait)")
        restart.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hup)
    try:
        sched.start()
        log.info("started with %d scheduled jobs: %s", len(jobs), ", ".join(f"{k} [{v}]" for k, v in jobs.items()))
        while not stop.wait(1.0):
            if restart.is_set():
                sched.pause()  # no job starts from now on; the running ones end as they would
                if running.idle():
                    break
        sched.shutdown(wait=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if restart.is_set() and not stop.is_set():
        log.info("restarting")
        return RESTART
    log.info("the daemon stopped")
    return 0


class _Running:
    """How many jobs run now (the daemon restarts only when none does)."""

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self._n += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._n -= 1

    def idle(self) -> bool:
        with self._lock:
            return self._n == 0


def _safe_run(cfg: Config, name: str, stop: threading.Event, running: _Running) -> None:
    if stop.is_set():
        return
    try:
        with running:
            run_one(cfg, name, stop)
    except Exception as e:  # the daemon outlives any one job's failure: one line (its traceback with --debug)
        jlog = logging.getLogger(f"rebal.job.{name}")
        jlog.error("failed: %s", e, exc_info=jlog.isEnabledFor(logging.DEBUG))

