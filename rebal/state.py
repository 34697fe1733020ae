"""SQLite state: one file, WAL mode, schema migrations by PRAGMA user_version.

Every write happens inside `atomic()`. Query functions are small and take the connection first.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import StateError
from .migrations import MIGRATIONS
from .outcome import Outcome
from .zfs.model import Pool

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config

SCHEMA_VERSION = len(MIGRATIONS)


PACKAGED_DB = "/var/lib/rebal/state.db"  # config.DEFAULT_STATE_DB: its directory is made by the package


def _create_private(path: str) -> None:
    """A new database file, private, in a directory made private if new; never the packaged default's
    directory (a command run without a config where rebal is not set up leaves none behind)."""
    where = os.path.dirname(os.path.abspath(path))
    if os.path.abspath(path) == PACKAGED_DB and not os.path.isdir(where):
        raise StateError(f"no state database: {where} does not exist, so rebal is not set up here (the package "
                         "and the README's install make it; or name a state_db in the config)")
    os.makedirs(where, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)


def _use_wal(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """Switch a database to WAL (a lasting property of the file). The switch needs the database to
    itself, and SQLite answers "locked" at once, without waiting, when another process opening the
    same new database holds it: retry for a while, as the busy timeout does for other statements."""
    import time

    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def connect(path: str | os.PathLike, *, migrate_to: int = SCHEMA_VERSION) -> sqlite3.Connection:
    """Open (creating with mode 0600) and migrate the state database."""
    p = os.fspath(path)
    try:
        if p != ":memory:" and not os.path.exists(p):
            _create_private(p)
        conn = sqlite3.connect(p, timeout=30, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        if str(path) != ":memory:":
            _use_wal(conn)
        # FULL: a commit is on disk when it returns. With NORMAL (in WAL mode) a power cut loses the
        # last commits while ZFS keeps what it had written: the journal entry naming a temp file
        # must be durable before the temp file exists (seen on OpenZFS 2.4.4 under power cuts).
        conn.execute("PRAGMA synchronous = FULL")
        migrate(conn, migrate_to)
    except PermissionError:
        raise StateError(f"cannot open state database {path}: permission denied (run as root, or set state_db)") from None
    except (OSError, sqlite3.Error) as e:
        raise StateError(f"cannot open state database {path}: {e}") from None
    return conn


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Bring the schema to ``target``. Two processes may open a new database at once (a run and a
    `rebal runs` beside it): the version is read again inside each write transaction, so the second
    one finds the work done instead of creating the tables twice."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > SCHEMA_VERSION:
        raise StateError(f"state database has schema {current}, newer than this rebal knows ({SCHEMA_VERSION}); upgrade rebal")
    if current < target:
        with atomic(conn):  # every step in one transaction: one commit (one fsync) for a new database
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            while current < target:
                for stmt in _statements(MIGRATIONS[current]):
                    conn.execute(stmt)
                current += 1
                conn.execute(f"PRAGMA user_version = {current}")
    return target


def _statements(script: str) -> list[str]:
    out, buf = [], []
    for line in script.splitlines():
        line = line.split("--", 1)[0]
        buf.append(line)
        if line.rstrip().endswith(";"):
            stmt = "\n".join(buf).strip()
            if stmt.strip(";").strip():
                out.append(stmt)
            buf = []
    rest = "\n".join(buf).strip()
    if rest:
        out.append(rest)
    return out


def inserted(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT made (SQLite gives every inserted row one)."""
    if cur.lastrowid is None:
        raise StateError("an INSERT into the state database made no row")
    return cur.lastrowid


@contextlib.contextmanager
def atomic(conn: sqlite3.Connection, durable: bool = True) -> Iterator[sqlite3.Connection]:
    """One write transaction (BEGIN IMMEDIATE); rolled back if the block raises. ``durable`` False:
    its commit is not synced on its own (synchronous = NORMAL for it), for rows that nothing on the
    pool depends on; the next durable commit syncs the write-ahead log, and with it this one (the
    log is written in order), so a power cut can lose such a commit only together with every
    commit after it."""
    if conn.in_transaction:
        yield conn
        return
    if not durable:
        conn.execute("PRAGMA synchronous = NORMAL")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        if not durable:
            conn.execute("PRAGMA synchronous = FULL")


# -- fill samples -----------------------------------------------------------------------------


def record_sample(conn: sqlite3.Connection, pool: Pool, ts: float | None = None) -> int:
    ts = time.time() if ts is None else ts
    with atomic(conn):
        cur = conn.execute(
            "INSERT INTO samples (ts, pool, size, alloc, free, spread) VALUES (?, ?, ?, ?, ?, ?)",
            (ts, pool.name, pool.size, pool.alloc, pool.free, pool.spread),
        )
        sid = inserted(cur)
        conn.executemany(
            "INSERT INTO sample_vdevs (sample_id, vdev, type, size, alloc, free) VALUES (?, ?, ?, ?, ?, ?)",
            [(sid, v.name, v.type, v.size, v.alloc, v.free) for v in pool.data_vdevs],
        )
    return sid


@dataclass(frozen=True, slots=True)
class SampleRow:
    ts: float
    spread: float
    vdevs: dict[str, tuple[int, int]]  # name -> (size, alloc)


def samples(conn: sqlite3.Connection, pool: str, since: float | None = None, limit: int = 10000) -> list[SampleRow]:
    """Samples of one pool, oldest first (the newest ``limit`` of them)."""
    rows = conn.execute(
        "SELECT id, ts, spread FROM samples WHERE pool = ? AND ts >= ? ORDER BY ts DESC, id DESC LIMIT ?",
        (pool, since or 0.0, limit),
    ).fetchall()
    rows.reverse()
    if not rows:
        return []
    by_id: dict[int, dict[str, tuple[int, int]]] = {r["id"]: {} for r in rows}
    q = "SELECT sample_id, vdev, size, alloc FROM sample_vdevs WHERE sample_id BETWEEN ? AND ?"
    for r in conn.execute(q, (rows[0]["id"], rows[-1]["id"])):
        if r["sample_id"] in by_id:
            by_id[r["sample_id"]][r["vdev"]] = (r["size"], r["alloc"])
    return [SampleRow(r["ts"], r["spread"], by_id[r["id"]]) for r in rows]


# -- runs -------------------------------------------------------------------------------------


def start_run(
    conn: sqlite3.Connection, kind: str, *, job: str | None = None, pool: str | None = None, key: str | None = None
) -> int:
    with atomic(conn):
        cur = conn.execute(
            "INSERT INTO runs (kind, job, pool, started, key) VALUES (?, ?, ?, ?, ?)", (kind, job, pool, time.time(), key)
        )
    return inserted(cur)


def set_progress(path: str, run_id: int, nbytes: int) -> None:
    """Record how far a running run is, from any thread (its own short connection)."""
    c = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        c.execute("UPDATE runs SET progress = ? WHERE id = ?", (nbytes, run_id))
    finally:
        c.close()


def end_run(conn: sqlite3.Connection, run_id: int, outcome: str, *, error: str | None = None, details: dict | None = None) -> None:
    with atomic(conn):
        conn.execute(
            "UPDATE runs SET ended = ?, outcome = ?, error = ?, details = ? WHERE id = ?",
            (time.time(), outcome, error, json.dumps(details) if details is not None else None, run_id),
        )


def reopen_run(conn: sqlite3.Connection, run_id: int) -> None:
    """A run continued by a later process: running again."""
    with atomic(conn):
        conn.execute("UPDATE runs SET outcome = NULL, ended = NULL WHERE id = ?", (run_id,))


def run_row(conn: sqlite3.Connection, run_id: int) -> sqlite3.Row | None:
    return conn.execute("SELECT id, kind, outcome, error, details FROM runs WHERE id = ?", (run_id,)).fetchone()


def resumable_run(conn: sqlite3.Connection, kind: str, key: str) -> int | None:
    """The newest run of ``kind`` on ``key`` if it did not finish (running when it died, interrupted,
    stopped or failed): its done parts need not be done again."""
    row = conn.execute("SELECT id, outcome FROM runs WHERE kind = ? AND key = ? ORDER BY id DESC LIMIT 1",
                       (kind, key)).fetchone()
    return row["id"] if row is not None and row["outcome"] in (None, Outcome.INTERRUPTED, Outcome.STOPPED, Outcome.FAILED) else None


def last_finished(conn: sqlite3.Connection, kind: str) -> list[sqlite3.Row]:
    """The newest finished run of ``kind`` on each pool: id, pool, outcome, error, details."""
    return conn.execute("SELECT id, pool, outcome, error, details FROM runs WHERE id IN (SELECT max(id) FROM runs "
                        "WHERE kind = ? AND outcome IS NOT NULL GROUP BY pool)", (kind,)).fetchall()


def newest_per_pool(conn: sqlite3.Connection, kind: str) -> list[sqlite3.Row]:
    """The newest run of ``kind`` on each pool, finished or not: pool, outcome, details."""
    return conn.execute("SELECT pool, outcome, details FROM runs WHERE id IN (SELECT max(id) FROM runs "
                        "WHERE kind = ? GROUP BY pool)", (kind,)).fetchall()


def last_of_job(conn: sqlite3.Connection, kind: str, job: str, outcomes: tuple[str, ...] | None = None):
    """The newest finished run of ``kind`` for ``job`` (of one of ``outcomes``, when given), or None."""
    sql = "SELECT id, outcome, started, ended, error, details FROM runs WHERE kind = ? AND job = ? AND outcome IS NOT NULL"
    args: list = [kind, job]
    if outcomes:
        sql += f" AND outcome IN ({', '.join('?' * len(outcomes))})"
        args += outcomes
    return conn.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()


def last_ended(conn: sqlite3.Connection, kind: str, job: str, outcome: str) -> float | None:
    """When the newest run of ``kind`` for ``job`` with ``outcome`` ended."""
    return conn.execute("SELECT max(ended) FROM runs WHERE kind = ? AND job = ? AND outcome = ?",
                        (kind, job, outcome)).fetchone()[0]


def last_started(conn: sqlite3.Connection, kind: str, job: str | None = None) -> float | None:
    """When the newest run of ``kind`` (for ``job``, when given) started."""
    if job is None:
        return conn.execute("SELECT max(started) FROM runs WHERE kind = ?", (kind,)).fetchone()[0]
    return conn.execute("SELECT max(started) FROM runs WHERE kind = ? AND job = ?", (kind, job)).fetchone()[0]


def notice(conn: sqlite3.Connection, subject: str) -> sqlite3.Row | None:
    """What was last said of ``subject``: level, digest, since, last_sent (None: nothing yet)."""
    return conn.execute("SELECT level, digest, since, last_sent FROM notify_state WHERE subject = ?",
                        (subject,)).fetchone()


def set_notice(conn: sqlite3.Connection, subject: str, level: str, digest: str, since: float,
               last_sent: float | None) -> None:
    with atomic(conn):
        conn.execute("INSERT OR REPLACE INTO notify_state (subject, level, digest, since, last_sent) "
                     "VALUES (?, ?, ?, ?, ?)", (subject, level, digest, since, last_sent))


def last_successes(conn: sqlite3.Connection, cfg: Config) -> list[dict]:
    """The last successful run of every configured replication job (for status, health, metrics)."""
    out = []
    now = time.time()
    for j in cfg.replicate:
        row = conn.execute(
            "SELECT id, ended, details FROM runs WHERE kind = 'replicate' AND job = ? AND outcome IN ('ok', 'warning') "
            "ORDER BY id DESC LIMIT 1", (j.name,)).fetchone()
        # a run that failed after it (or with none before): said until a run lands
        failed = conn.execute(
            "SELECT id, ended, outcome, error FROM runs WHERE kind = 'replicate' AND job = ? AND id > ? "
            "AND outcome IN ('failed', 'interrupted') ORDER BY id DESC LIMIT 1",
            (j.name, row["id"] if row is not None else 0)).fetchone()
        last_failure = None if failed is None else {"run": failed["id"], "ended": failed["ended"],
                                                     "outcome": failed["outcome"], "error": failed["error"] or ""}
        if row is None:
            out.append({"job": j.name, "mode": j.mode, "last_success": None, "age_seconds": None, "snapshot": None,
                        "last_failure": last_failure})
            continue
        d = json.loads(row["details"] or "{}")
        out.append({"job": j.name, "mode": j.mode, "last_success": row["ended"], "age_seconds": round(now - row["ended"]),
                    "snapshot": d.get("snapshot"), "bytes": d.get("bytes"), "last_failure": last_failure})
    return out


def record_points(conn: sqlite3.Connection, job: str, rows: list[tuple[str, str, float]]) -> None:
    """(dataset, snapshot, when it was taken): now the newest on the job's target."""
    now = time.time()
    with atomic(conn):
        conn.executemany("INSERT OR REPLACE INTO replica_points (job, dataset, snapshot, taken, recorded) "
                         "VALUES (?, ?, ?, ?, ?)", [(job, d, s, t, now) for d, s, t in rows])


def replica_points(conn: sqlite3.Connection, job: str) -> dict[str, tuple[str, float]]:
    """dataset -> (newest snapshot on the target, when it was taken), as the job's runs recorded it."""
    rows = conn.execute("SELECT dataset, snapshot, taken FROM replica_points WHERE job = ?", (job,)).fetchall()
    return {r["dataset"]: (r["snapshot"], r["taken"]) for r in rows}


DIED = "interrupted (the process died: a crash, a kill or a power cut)"


def mark_dead_runs(conn: sqlite3.Connection, kind: str, *, pool: str | None = None, job: str | None = None,
                   keep: int | None = None) -> int:
    """Runs of ``kind`` (of a pool or a job) that never ended: their process died. Called with that
    kind's lock held, so none of them is running. ``keep``: a run being continued."""
    q = "UPDATE runs SET outcome = 'interrupted', ended = started, error = ? WHERE kind = ? AND outcome IS NULL"
    args: list = [DIED, kind]
    if pool is not None:
        q += " AND pool = ?"
        args.append(pool)
    if job is not None:
        q += " AND job = ?"
        args.append(job)
    if keep is not None:
        q += " AND id != ?"
        args.append(keep)
    with atomic(conn):
        return conn.execute(q, args).rowcount


def _live_state(state_db: str | None, kind: str, pool: str | None, job: str | None) -> str:
    """What a run that never ended is: running while the holder of its lock lives, else interrupted."""
    if not state_db or kind not in ("rebalance", "replicate"):
        return "running or crashed"  # no lock tells
    from .locks import holder_alive

    return "running" if holder_alive(state_db, f"rebalance-{pool}" if kind == "rebalance" else f"replicate-{job}") \
        else Outcome.INTERRUPTED


RUN_KINDS = ("rebalance", "refresh", "replicate", "restore", "heal", "verify", "fill", "health", "scrub", "metrics")


def list_runs(conn: sqlite3.Connection, *, kind: str | None = None, job: str | None = None, limit: int = 20,
              state_db: str | None = None) -> list[dict]:
    """The newest runs as plain dicts (for `rebal runs`), newest first. A run that never ended shows
    as running while its process lives, else as interrupted (``state_db`` locates the locks)."""
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
    out = []
    for r in conn.execute(q, args).fetchall():
        live = None if r["outcome"] else _live_state(state_db, r["kind"], r["pool"], r["job"])
        out.append({
            "id": r["id"], "kind": r["kind"], "job": r["job"], "pool": r["pool"],
            "started": _iso(r["started"]), "ended": _iso(r["ended"]) if r["ended"] else None,
            "seconds": round(r["ended"] - r["started"], 1) if r["ended"] else None,
            "outcome": r["outcome"] or live,
            "error": DIED if live == Outcome.INTERRUPTED else r["error"],
            "details": json.loads(r["details"]) if r["details"] else {},
            "progress": r["progress"],
        })
    return out


def _iso(ts: float) -> str:
    from .units import iso

    return iso(ts)


class Cache:
    """Answers worth keeping between runs (what the backup host's zfs can do), in the kv table, each
    with the time it was learnt; older than ``max_age`` seconds counts as unknown."""

    def __init__(self, conn: sqlite3.Connection, max_age: float = 86400.0) -> None:
        self.conn, self.max_age = conn, max_age

    def get(self, key: str, max_age: float | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            d = json.loads(row[0])
        except ValueError:
            return None
        return d.get("v") if time.time() - d.get("t", 0) <= (self.max_age if max_age is None else max_age) else None

    def set(self, key: str, value: str) -> None:
        with atomic(self.conn):
            self.conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)",
                              (key, json.dumps({"v": value, "t": time.time()})))

    def forget(self, key: str) -> None:
        with atomic(self.conn):
            self.conn.execute("DELETE FROM kv WHERE key = ?", (key,))


def record(conn: sqlite3.Connection, key: str) -> dict | None:
    """A JSON record kept in the kv table under ``key`` (a failover's, a failback's), None if none."""
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    try:
        value = json.loads(row[0]) if row else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def set_record(conn: sqlite3.Connection, key: str, value: dict | None) -> None:
    """Keep ``value`` under ``key`` durably (None: forget it)."""
    with atomic(conn):
        if value is None:
            conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        else:
            conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, json.dumps(value)))


def failover_key(job: str) -> str:
    """The record of a job whose backup is served while its file server is down (recover/failover.py)."""
    return f"failover:{job}"


def failback_key(job: str) -> str:
    """The record of a job's failback, step by step (recover/failback.py)."""
    return f"failback:{job}"
