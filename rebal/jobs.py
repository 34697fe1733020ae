"""The jobs rebal runs unattended, each one function: fill sampling, health (with notifications),
scrub, the scheduled rebalance, replication jobs, metrics. Used by the CLI, `rebal run` and the
daemon alike. Library code: returns values, never prints."""

from __future__ import annotations

import sqlite3

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from . import health as H
from . import state
from .config import Config
from .errors import RebalError
from .outcome import Outcome
from .recorded import recorded

if TYPE_CHECKING:
    from .rebalance.prepare import Prepared
    from .zfs.host import ZfsHost

log = logging.getLogger(__name__)


def watched_pools(cfg: Config, host: ZfsHost) -> list:
    return host.pools(list(cfg.pools))


def fill_job(cfg: Config, conn: sqlite3.Connection, host: ZfsHost) -> dict:
    pools = watched_pools(cfg, host)
    for p in pools:
        state.record_sample(conn, p)
    return {"pools": {p.name: round(p.spread, 2) for p in pools}}


def pool_created(names: list[str], host: ZfsHost) -> dict[str, float]:
    """When each pool was made: the creation time of its root dataset (zpool has no such property)."""
    return host.creation(names)


def sector_mismatches(pool: str, host: ZfsHost) -> list:
    """The pool's vdevs with an ashift below their disks' physical sectors (zdb -C, lsblk); [] where
    zdb cannot read the pool's configuration."""
    from .process.command import run
    from .zfs.placement import parse_config
    from .zfs.sectors import mismatches, physical_sector

    try:
        config = host.zdb(["-C", pool])
    except RebalError:
        return []
    return mismatches(parse_config(config), lambda p: physical_sector(p, run))


def check_health(cfg: Config, conn: sqlite3.Connection, host: ZfsHost, now: float | None = None,
                 extra: dict | None = None) -> tuple[list[H.Finding], list, list]:
    """Findings, pools, replication. ``extra`` (a dict) is filled with what metrics also show:
    "scrub" (pool -> end of its last scrub) and "created" (pool -> creation)."""
    # every imported pool, then the watched ones among them: a watched pool that is not imported is
    # the check's most critical finding, in its report (an error would print no report at all)
    imported = host.pools()
    pools = [p for p in imported if not cfg.pools or p.name in cfg.pools]
    # status of every pool, by no name: a pool exported or destroyed since the listing is then left
    # out, where naming it would make `zpool status` fail the whole check
    statuses = {s.name: s for s in host.status()} if pools else {}
    created = pool_created([p.name for p in pools], host)
    findings: list[H.Finding] = [
        H.Finding(H.CRITICAL, name, "the pool is not imported: `zpool import " + name + "` (or take it out of "
                  "`pools` in the config if it is gone for good)")
        for name in cfg.pools if name not in {p.name for p in imported}]
    for p in pools:
        st = statuses.get(p.name)
        if st is None:
            continue
        findings += H.pool_findings(st, p, cap_warning=cfg.health.cap_warning, cap_critical=cfg.health.cap_critical,
                                    target_spread=cfg.rebalance.target_spread,
                                    scrub_max_age_days=cfg.health.scrub_max_age_days, now=now,
                                    created=created.get(p.name))
        findings += H.sector_findings(p.name, sector_mismatches(p.name, host))
    if extra is not None:
        extra["created"] = created
        extra["scrub"] = {n: t for n, st in statuses.items() if (t := H.scrub_time(st.scan)) is not None}
    repl = state.last_successes(conn, cfg) if cfg.replicate else []
    findings += H.replication_findings(repl, cfg.health.replication_max_age_hours)
    ages = snapshot_ages(cfg, conn, host)
    for r in repl:
        r["points"] = next((a for a in ages if a["job"] == r["job"]), None)
    findings += H.snapshot_age_findings(ages, time.time() if now is None else now)
    findings += verify_findings(cfg, conn, now)
    findings += rebalance_findings(conn, host)
    return findings, pools, repl


def snapshot_ages(cfg: Config, conn: sqlite3.Connection, host: ZfsHost) -> list[dict]:
    """Per job: the newest snapshot each of its datasets has on the target (from the runs' records),
    and the datasets it chooses now that were never replicated (a push job lists its source here;
    a pull job's source is the other host: only what was recorded)."""
    from .replicate.select import select

    out = []
    for j in cfg.replicate:
        have: dict = dict(state.replica_points(conn, j.name))
        if j.direction == "push":
            try:
                for ds in select(j, host).included:
                    have.setdefault(ds, None)
            except RebalError:  # the source is gone or ZFS does not answer: the pool findings say so
                pass
        out.append({"job": j.name, "max_age_hours": j.snapshot_max_age_hours or cfg.health.replication_max_age_hours,
                    "datasets": have})
    return out


def _steer_left(conn: sqlite3.Connection) -> str | None:
    from .rebalance.steer import NAME, left_behind
    from .zfs.tunable import Parameter

    return left_behind(conn, Parameter(NAME))


def rebalance_findings(conn: sqlite3.Connection, host: ZfsHost) -> list[H.Finding]:
    """The last rebalance of each pool: one that failed is a warning until a later run succeeds; one
    that rewrote data snapshots still hold is waiting for them (said, not a problem) until they go.
    First, the allocator's threshold a killed steered run left set is put back."""
    import json

    out = []
    said = _steer_left(conn)
    if said:  # a steered run killed outright: its threshold put back (or why not)
        out.append(H.Finding(H.WARNING if "could not" in said else H.OK, "rebalance", said))
    for rid, pool, outcome, error, details in state.last_finished(conn, "rebalance"):
        if outcome == Outcome.FAILED:
            out.append(H.Finding(H.WARNING, pool or "rebalance",
                                 f"the last rebalance (run {rid}) failed: {(error or '').splitlines()[0][:300]}"))
            continue
        d = json.loads(details) if details else {}
        snaps = d.get("waiting_on") or []
        if not snaps:
            continue
        there = host.snapshots_there(snaps)
        if there:
            then = d.get("spread_when_freed")
            out.append(H.Finding(H.OK, pool, f"rebalance run {rid} waiting for {len(there)} snapshot(s) to go "
                                 f"({', '.join(there[-2:])}): they hold {d.get('growth', 0)} bytes of old copies"
                                 + (f"; the spread is about {then:.1f} then" if then is not None else "")))
    return out


def verify_findings(cfg: Config, conn: sqlite3.Connection, now: float | None = None) -> list[H.Finding]:
    """The last `rebal verify` of each job: a mismatch stays critical until a verify passes;
    no good verify within verify_max_age_days is a warning."""
    import json

    now = time.time() if now is None else now
    out = []
    for j in cfg.replicate:
        last = state.last_of_job(conn, "verify", j.name)
        good = state.last_ended(conn, "verify", j.name, Outcome.OK)
        subject = f"job:{j.name}"
        if last is not None and last["outcome"] == Outcome.FAILED:
            d = json.loads(last["details"] or "{}")
            what = "; ".join(f["message"] for f in d.get("findings", []) if f["level"] == "CRITICAL")[:300]
            out.append(H.Finding(H.CRITICAL, subject, f"the last verify found the backup differs: {what}"))
        if good is None:
            out.append(H.Finding(H.WARNING, subject, "the backup was never verified (rebal verify " + j.name + ")"))
        elif now - good > cfg.health.verify_max_age_days * 86400:
            out.append(H.Finding(H.WARNING, subject, f"last good verify {(now - good) / 86400:.0f} days ago"))
    return out


def digest(findings: list[H.Finding]) -> str:
    """What the findings say, without the numbers that move a little every time (CAP %, ages), and
    without OK findings (information, such as a rebalance waiting for snapshots: never a notification)."""
    return "|".join(sorted({re.sub(r"\d+(\.\d+)?", "#", f.line()) for f in findings if f.level > H.OK}))


def health_job(cfg: Config, conn: sqlite3.Connection, host: ZfsHost, now: float | None = None,
               checked: list | None = None) -> tuple[int, list[H.Finding], dict | None]:
    """``checked`` (a list) gets what was checked, found wrong or not: a line per pool and job."""
    from .notify import channels, maybe_notify

    findings, pools, repl = check_health(cfg, conn, host, now)
    if checked is not None:
        checked += [{"pool": p.name, "health": p.health, "cap": round(p.cap, 1), "spread": round(p.spread, 1),
                     "vdevs": len(p.data_vdevs)} for p in pools]
        checked += [{"job": r["job"], "mode": r["mode"], "last_success": r["last_success"],
                     "age_hours": None if r["age_seconds"] is None else round(r["age_seconds"] / 3600, 1)}
                    for r in repl]
    level = H.overall(findings)
    sent = None
    if channels(cfg.notify):
        body = "\n".join(f.line() for f in findings) or "all pools healthy"
        sent = maybe_notify(conn, cfg.notify, "health", H.LEVEL_NAMES[level], digest(findings), body,
                            {"findings": [f.as_dict() for f in findings]}, now=now)
    return level, findings, sent


def scrub_job(cfg: Config, conn: sqlite3.Connection, host: ZfsHost) -> dict:
    out = {}
    for p in watched_pools(cfg, host):
        out[p.name] = "running" if host.scrub(p.name) == "running" else "started"
    return out


def rebalance_job(cfg: Config, conn: sqlite3.Connection, host: ZfsHost, stop: threading.Event,
                  on_wait: Callable[[str], None] | None = None) -> dict:
    from contextlib import ExitStack

    from .locks import Together
    from .rebalance import engine
    from .rebalance.options import options_from
    from .rebalance.prepare import checked, prepare

    rb = cfg.rebalance
    if not rb.targets:
        return {"skipped": "no [rebalance] targets configured"}
    opts = options_from(cfg, list(rb.targets), until=cfg.schedule.rebalance_end, listing=True)
    prep = None
    with ExitStack() as held:
        def pins(p: Prepared) -> Prepared:
            """A run of the jobs whose snapshots pin this data may be about to drop them (a verify's
            snapshot): wait for it, and prepare again if it ran."""
            ours = _own_pins(p)
            if not ours:
                return p
            jobs = ours + [r["job"] for r in (p.costs or {}).get("replication", [])]  # all at once, in order
            waited: list[str] = []

            def told(text: str) -> None:
                waited.append(text)
                if on_wait:
                    on_wait(text)

            held.enter_context(Together(cfg.state_db, jobs, f"rebalance of pool {p.pool.name}", stop=stop, on_wait=told))
            if waited:  # (no run was under way: the snapshots stay, and the plan stands)
                return prepare(opts, host, conn)
            return p

        try:
            prep = prepare(opts, host, conn)
            prep = checked(prep, opts, pins=pins)
        except RebalError as e:  # a refusal is a run that could not do its job: recorded as failed
            spec = rb.targets[0]
            pool = prep.pool.name if prep else (None if spec.startswith("/") else spec.split("/")[0])
            with recorded(conn, "rebalance", pool=pool) as run:  # no key: a refusal is not a run to continue
                run.outcome, run.error, run.details = Outcome.FAILED, str(e), {"refused": True}
            raise
        rep = engine.execute(prep, opts, host, conn, cfg.state_db, stop=stop)
    return rep.as_dict()


def _own_pins(prep: Prepared) -> list[str]:
    """The replication jobs whose snapshots pin data this rebalance would rewrite."""
    if not prep.scan.pinned_bytes:
        return []
    return sorted({s["owner"][6:] for s in (prep.costs or {}).get("snapshots", []) if s["owner"].startswith("rebal:")})


def refresh_job(cfg: Config, conn: sqlite3.Connection, host: ZfsHost, stop: threading.Event) -> dict:
    """`rebal refresh` of [refresh].targets (datasets or directories), with [rebalance]'s settings."""
    from . import refresh

    rf = cfg.refresh
    if not rf.targets:
        return {"skipped": "no [refresh] targets configured"}
    paths = [t if t.startswith("/") else host.mounted_at(t) for t in rf.targets]
    given = {"max_bytes": rf.max_bytes, "until": cfg.schedule.refresh_end}
    return refresh.refresh(cfg, paths, host, conn, given=given, stop=stop)


def rebalance_summary(conn: sqlite3.Connection) -> list[dict]:
    import json

    out = []
    for row in state.newest_per_pool(conn, "rebalance"):
        d = json.loads(row["details"] or "{}")
        out.append({"pool": row["pool"], "running": row["outcome"] is None, "bytes": d.get("bytes", 0),
                    "files": d.get("files", 0)})
    return out


def metrics_text(cfg: Config, conn: sqlite3.Connection, host: ZfsHost) -> str:
    return "\n".join(metrics_doc(cfg, conn, host).lines) + "\n"


def metrics_doc(cfg: Config, conn: sqlite3.Connection, host: ZfsHost):
    from .metrics import document

    extra: dict = {}
    findings, pools, repl = check_health(cfg, conn, host, extra=extra)
    levels = {p.name: max((f.level for f in findings if f.subject == p.name), default=0) for p in pools}
    limits = {"target_spread": cfg.rebalance.target_spread, "scrub_max_age_days": cfg.health.scrub_max_age_days,
              "replication_max_age_hours": cfg.health.replication_max_age_hours}
    return document(pools, levels, repl, rebalance_summary(conn), scrubs=extra.get("scrub", {}),
                    created=extra.get("created", {}), limits=limits)


def metrics_job(cfg: Config, conn: sqlite3.Connection, host: ZfsHost) -> dict:
    """Write the metrics file for node_exporter's textfile collector (schedule.metrics)."""
    from .metrics import atomic_file

    with atomic_file(cfg.metrics_file) as put:  # a place it cannot write fails before the work
        text = metrics_text(cfg, conn, host)
        put(text)
    return {"file": cfg.metrics_file, "series": sum(1 for ln in text.splitlines() if ln and not ln.startswith("#"))}


T = TypeVar("T")


def record(conn: sqlite3.Connection, kind: str, fn: Callable[[], T], job: str | None = None) -> T:
    """Run ``fn`` as a recorded run of ``kind`` (recorded.py owns the row). The outcome is the one
    ``fn`` returns in its dict (a refresh that failed returns, it does not raise), else ok; an
    exception is a failure."""

    with recorded(conn, kind, job=job) as run:
        result = fn()
        run.details = result if isinstance(result, dict) else {"result": result}
        run.outcome = Outcome(str(run.details.get("outcome") or Outcome.OK))
        run.error = run.details.get("reason") if run.outcome is Outcome.FAILED else None
    return result
