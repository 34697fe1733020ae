import os
import sqlite3
import stat

import pytest

from rebal import state
from rebal.errors import StateError
from rebal.zfs.model import Pool, Vdev


def pool(alloc0, alloc1, name="tank"):
    vd = (Vdev("a", "disk", 1000, alloc0, 1000 - alloc0), Vdev("b", "disk", 1000, alloc1, 1000 - alloc1),
          Vdev("l", "disk", 100, 0, 100, vclass="log"))
    return Pool(name, 2000, alloc0 + alloc1, 2000 - alloc0 - alloc1, "ONLINE", vd)


def test_new_database_is_private_wal_and_current(tmp_path):
    path = tmp_path / "sub" / "state.db"
    conn = state.connect(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == state.SCHEMA_VERSION


def test_upgrade_from_version_1_keeps_data(tmp_path):
    path = tmp_path / "old.db"
    old = state.connect(path, migrate_to=1)
    assert old.execute("PRAGMA user_version").fetchone()[0] == 1
    old.execute("INSERT INTO samples (ts, pool, size, alloc, free, spread) VALUES (1, 'tank', 2, 1, 1, 5.5)")
    old.execute("INSERT INTO sample_vdevs (sample_id, vdev, size, alloc, free) VALUES (1, 'a', 2, 1, 1)")
    old.close()
    conn = state.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == state.SCHEMA_VERSION
    rows = state.samples(conn, "tank")
    assert len(rows) == 1 and rows[0].spread == 5.5 and rows[0].vdevs == {"a": (2, 1)}
    assert conn.execute("SELECT type FROM sample_vdevs").fetchone()[0] == ""  # column added by v2


def _open(path, barrier, errors):
    barrier.wait()
    try:
        state.connect(path).close()
    except Exception as e:  # noqa: BLE001 - reported to the test
        errors.put(repr(e))


def test_many_processes_open_a_new_database_at_once(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier, errors = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(tmp_path / "new.db", barrier, errors)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    c = sqlite3.connect(path)
    c.execute(f"PRAGMA user_version = {state.SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(StateError, match="newer than this rebal"):
        state.connect(path)


def test_unwritable_location_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateError, match="cannot open state database"):
        state.connect(blocker / "state.db")


def test_samples_record_data_vdevs_only_and_since(tmp_path):
    conn = state.connect(tmp_path / "s.db")
    state.record_sample(conn, pool(800, 100), ts=100)
    state.record_sample(conn, pool(500, 400), ts=200)
    state.record_sample(conn, pool(1, 1, name="other"), ts=300)
    rows = state.samples(conn, "tank")
    assert [r.ts for r in rows] == [100, 200]
    assert rows[0].vdevs == {"a": (1000, 800), "b": (1000, 100)}
    assert rows[0].spread == pytest.approx(70.0)
    assert [r.ts for r in state.samples(conn, "tank", since=150)] == [200]


def test_atomic_rolls_back(tmp_path):
    conn = state.connect(tmp_path / "s.db")
    with pytest.raises(RuntimeError):
        with state.atomic(conn):
            conn.execute("INSERT INTO kv VALUES ('a', 'b')")
            raise RuntimeError
    assert conn.execute("SELECT count(*) FROM kv").fetchone()[0] == 0


def test_runs(tmp_path):
    conn = state.connect(tmp_path / "s.db")
    rid = state.start_run(conn, "rebalance", pool="tank")
    state.end_run(conn, rid, "ok", details={"bytes": 5})
    row = conn.execute("SELECT * FROM runs").fetchone()
    assert row["outcome"] == "ok" and row["details"] == '{"bytes": 5}' and row["ended"] >= row["started"]


def test_cache_keeps_answers_for_a_while(tmp_path):
    from rebal import state

    conn = state.connect(tmp_path / "s.db")
    c = state.Cache(conn, max_age=60)
    assert c.get("k") is None
    c.set("k", "usage: zfs receive -s")
    assert c.get("k") == "usage: zfs receive -s"
    assert state.Cache(conn, max_age=-1).get("k") is None  # too old counts as unknown
    c.forget("k")
    assert c.get("k") is None


def test_a_relaxed_commit_is_synced_by_the_next_durable_one_and_full_comes_back(tmp_path):
    """Rows nothing on the pool depends on commit with synchronous = NORMAL; every other commit
    stays FULL (a journal row naming a temp must be on disk before the temp exists)."""
    conn = state.connect(str(tmp_path / "s.db"))
    full = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert full == 2  # FULL
    with state.atomic(conn, durable=False):
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL for this one
        conn.execute("INSERT INTO samples (ts, pool, size, alloc, free, spread) VALUES (1, 'p', 1, 1, 0, 0)")
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == full
    with pytest.raises(RuntimeError):
        with state.atomic(conn, durable=False):
            conn.execute("INSERT INTO samples (ts, pool, size, alloc, free, spread) VALUES (2, 'p', 1, 1, 0, 0)")
            raise RuntimeError("boom")
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == full, "FULL again after a rollback"
    assert conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1


def test_a_new_database_is_made_in_one_transaction(tmp_path):
    conn = state.connect(tmp_path / "new.db", migrate_to=0)
    said: list[str] = []
    conn.set_trace_callback(said.append)
    assert state.migrate(conn) == state.SCHEMA_VERSION
    assert conn.execute("PRAGMA user_version").fetchone()[0] == state.SCHEMA_VERSION > 1
    assert sum(s.strip().upper().startswith("COMMIT") for s in said) == 1  # one commit, one fsync


def test_the_packaged_state_directory_is_never_made(tmp_path, monkeypatch):
    """A command run without a config where rebal is not set up must not leave /var/lib/rebal
    behind (it made it silently); a state_db the admin names in a new directory is still made."""
    from rebal import config

    assert config.DEFAULT_STATE_DB == state.PACKAGED_DB
    where = tmp_path / "var" / "lib" / "rebal"
    monkeypatch.setattr(state, "PACKAGED_DB", str(where / "state.db"))
    with pytest.raises(StateError, match="rebal is not set up here"):
        state.connect(where / "state.db")
    assert not (tmp_path / "var").exists()
    state.connect(tmp_path / "elsewhere" / "state.db").close()
    assert stat.S_IMODE(os.stat(tmp_path / "elsewhere").st_mode) == 0o700


def test_a_recorded_job_that_returns_a_failure_is_recorded_failed(tmp_path):
    """A scheduled refresh that fails returns its report (it does not raise): it was recorded ok."""
    from rebal.jobs import record

    conn = state.connect(tmp_path / "s.db")
    record(conn, "refresh", lambda: {"outcome": "failed", "reason": "no file could be rewritten: 3 read-only"})
    record(conn, "refresh", lambda: {"outcome": "stopped", "reason": "the end of the time window"})
    record(conn, "fill", lambda: {"pools": 1})
    rows = {r["id"]: r for r in state.list_runs(conn)}
    assert [(r["kind"], r["outcome"], r["error"]) for r in sorted(rows.values(), key=lambda r: r["id"])] == [
        ("refresh", "failed", "no file could be rewritten: 3 read-only"), ("refresh", "stopped", None), ("fill", "ok", None)]
