"""The record of a rebuild (rebal rebuild): what was recorded before the pool was destroyed, and the
steps, in the state database (tables rebuilds and rebuild_steps)."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import asdict, dataclass, field

from .. import state
from ..errors import RebalError

# properties a receive sets, or that are not the admin's to set again on a restored dataset
NOT_SET_AGAIN = {"encryption", "keyformat", "pbkdf2iters", "encryptionroot", "keystatus", "readonly", "volsize",
                 "volblocksize", "utf8only", "normalization", "casesensitivity"}


class RebuildError(RebalError):
    pass


class RebuildRefused(RebuildError):
    exit_code = 2


@dataclass
class Record:
    pool: str
    job: str
    point: str = ""
    pool_guid: str = ""
    layout: str = ""  # zpool status -P as it was
    pool_props: dict[str, str] = field(default_factory=dict)  # set locally on the pool
    ashift: str = ""
    datasets: list[str] = field(default_factory=list)  # of the job, as they were
    props: dict[str, dict[str, str]] = field(default_factory=dict)  # dataset -> its own properties
    crypt: dict[str, dict[str, str]] = field(default_factory=dict)  # dataset -> encryptionroot, keylocation
    left_out: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # for the admin, in order
    files: list[int] = field(default_factory=list)  # files and bytes verified at the point
    step: str = ""
    steps: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load(conn: sqlite3.Connection, pool: str) -> Record | None:
    row = conn.execute("SELECT record, step FROM rebuilds WHERE pool = ?", (pool,)).fetchone()
    if row is None:
        return None
    rec = Record(**json.loads(row[0]))
    rec.step = row[1]
    rec.steps = [{"step": s, "at": at, "note": n} for s, at, n in conn.execute(
        "SELECT step, at, note FROM rebuild_steps WHERE pool = ? ORDER BY id", (pool,))]
    return rec


def save(conn: sqlite3.Connection, rec: Record, step: str, note: str = "") -> None:
    """The procedure reached ``step``: the record as it is now, and the step's line, in one transaction."""
    rec.step = step
    body = asdict(rec)
    body.pop("steps")
    now = time.time()
    with state.atomic(conn):
        conn.execute("INSERT INTO rebuilds (pool, job, step, record, started, updated) VALUES (?, ?, ?, ?, ?, ?) "
                     "ON CONFLICT(pool) DO UPDATE SET job = excluded.job, step = excluded.step, "
                     "record = excluded.record, updated = excluded.updated",
                     (rec.pool, rec.job, step, json.dumps(body), now, now))
        conn.execute("INSERT INTO rebuild_steps (pool, step, at, note) VALUES (?, ?, ?, ?)", (rec.pool, step, now, note))
    rec.steps.append({"step": step, "at": now, "note": note})
