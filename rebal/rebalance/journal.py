"""The crash-safe rebalance journal in SQLite, and recovery after a crash.

Before any file of a batch is touched, one transaction records for each: directory, name, the temp
name its copy will get, and what the original looked like (inode, size, mtime, ctime), in state
`copying`. Outcomes are committed per batch. Directories are marked done as they finish.

Recovery never needs to know how far a file got, because at every instant the file's own name holds
a complete file (the original until the rename, the verified copy after): it only removes the temp
names rebal made, identified by their inode, and leaves anything it cannot identify alone (and says
so).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..outcome import Outcome
from ..state import atomic, inserted
from .files import FileRef, group_tmp_name, old_name, tmp_name

OPEN = "copying"



def begin_batch(conn: sqlite3.Connection, run_id: int, refs: Iterable[FileRef]) -> list[int]:
    """Record that these files are about to be copied; returns the journal ids (same order)."""
    ids = []
    with atomic(conn):
        for r in refs:
            cur = conn.execute(
                "INSERT INTO journal (run_id, dir, name, tmp, orig_ino, size, mtime_ns, ctime_ns, state)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, r.dir, r.name, tmp_name(r.ino), r.ino, r.size, r.mtime_ns, r.ctime_ns, OPEN),
            )
            ids.append(inserted(cur))
    return ids


def begin_group(conn: sqlite3.Connection, run_id: int, refs: list[FileRef]) -> int:
    """Record a hardlink group about to be rewritten as one (all names, one inode)."""
    r = refs[0]
    with atomic(conn):
        cur = conn.execute(
            "INSERT INTO journal (run_id, dir, name, tmp, orig_ino, size, mtime_ns, ctime_ns, state)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, r.dir, r.name, tmp_name(r.ino), r.ino, r.size, r.mtime_ns, r.ctime_ns, OPEN),
        )
        jid = inserted(cur)
        conn.executemany(
            "INSERT INTO journal_links (journal_id, idx, dir, name) VALUES (?, ?, ?, ?)",
            [(jid, k, x.dir, x.name) for k, x in enumerate(refs)],
        )
    return jid


def group_copied(conn: sqlite3.Connection, jid: int, copy_ino: int) -> None:
    """The group's verified copy exists under every temp name: names are about to be switched."""
    with atomic(conn):
        conn.execute("UPDATE journal SET state = 'linking', copy_ino = ? WHERE id = ?", (copy_ino, jid))


def finish_batch(conn: sqlite3.Connection, outcomes: Iterable[tuple[int, str, str, int | None]]) -> None:
    """(journal id, state, reason, copy inode) for each file of a batch. Swapped rows are dropped:
    the file is done and the run's totals keep the figures; the others stay for the report.
    Not synced on its own: a lost row change leaves a row `copying` whose temp is gone, which
    recovery passes over (the next begin_batch's durable commit syncs it anyway)."""
    with atomic(conn, durable=False):
        for jid, state, reason, copy_ino in outcomes:
            if state == "swapped":
                conn.execute("DELETE FROM journal WHERE id = ?", (jid,))
            else:
                conn.execute(
                    "UPDATE journal SET state = ?, reason = ?, copy_ino = ? WHERE id = ?", (state, reason, copy_ino, jid)
                )


def start_dir(conn: sqlite3.Connection, run_id: int, path: bytes, st: os.stat_result) -> None:
    """Record a directory's times before its entries change (renames move its mtime). Not synced on
    its own: the directory's first begin_batch, durable, comes before any entry changes."""
    with atomic(conn, durable=False):
        conn.execute(
            "INSERT OR REPLACE INTO rebalance_dirs (run_id, path, state, ino, atime_ns, mtime_ns)"
            " VALUES (?, ?, 'started', ?, ?, ?)",
            (run_id, path, st.st_ino, st.st_atime_ns, st.st_mtime_ns),
        )


def end_dir(conn: sqlite3.Connection, run_id: int, path: bytes, files: int, nbytes: int, done: bool) -> None:
    """Not synced on its own: a lost `done` only means the directory is rewritten again."""
    with atomic(conn, durable=False):
        conn.execute(
            "UPDATE rebalance_dirs SET state = ?, files = ?, bytes = ?, ended = ? WHERE run_id = ? AND path = ?",
            ("done" if done else Outcome.INTERRUPTED, files, nbytes, time.time(), run_id, path),
        )


def dirs_ended(conn: sqlite3.Connection, run_id: int, rows: list[tuple[bytes, int, int, bool]]) -> None:
    """(path, files, bytes, done) of directories rewritten in place, in one transaction: nothing on
    the pool depends on these rows (a lost one only means the directory is rewritten again)."""
    now = time.time()
    with atomic(conn, durable=False):
        conn.executemany(
            "INSERT OR REPLACE INTO rebalance_dirs (run_id, path, state, files, bytes, ended) VALUES (?, ?, ?, ?, ?, ?)",
            [(run_id, p, "done" if done else Outcome.INTERRUPTED, f, b, now) for p, f, b, done in rows])


def dir_state(conn: sqlite3.Connection, run_id: int, path: bytes) -> str | None:
    row = conn.execute("SELECT state FROM rebalance_dirs WHERE run_id = ? AND path = ?", (run_id, path)).fetchone()
    return row[0] if row else None


def done_dirs(conn: sqlite3.Connection, run_id: int) -> set[bytes]:
    rows = conn.execute("SELECT path FROM rebalance_dirs WHERE run_id = ? AND state = 'done'", (run_id,))
    return {bytes(r[0]) for r in rows}


def done_totals(conn: sqlite3.Connection, run_id: int) -> tuple[int, int]:
    """(files, bytes) of the directories a run finished."""
    row = conn.execute("SELECT coalesce(sum(files), 0), coalesce(sum(bytes), 0) FROM rebalance_dirs "
                       "WHERE run_id = ? AND state = 'done'", (run_id,)).fetchone()
    return int(row[0]), int(row[1])


def dirs_done_since(conn: sqlite3.Connection, pool: str, since: float) -> set[bytes]:
    """Directories that any rebalance of ``pool`` started after ``since`` finished (after a RAIDZ
    expansion: their files were rewritten at the new ratio, whatever their ctime says)."""
    rows = conn.execute(
        "SELECT d.path FROM rebalance_dirs d JOIN runs r ON r.id = d.run_id "
        "WHERE r.kind = 'rebalance' AND r.pool = ? AND r.started > ? AND d.state = 'done'", (pool, since))
    return {bytes(r[0]) for r in rows}


def skipped(conn: sqlite3.Connection, run_id: int) -> list[tuple[bytes, str, str]]:
    rows = conn.execute(
        "SELECT dir, name, state, reason FROM journal WHERE run_id = ? AND state != ? ORDER BY id", (run_id, OPEN)
    )
    return [(os.path.join(bytes(r[0]), bytes(r[1])), r[2], r[3] or "") for r in rows]


@dataclass
class Recovery:
    removed: list[str] = field(default_factory=list)  # temp names removed
    left: list[str] = field(default_factory=list)  # temp names not recognised: left alone
    rows: int = 0
    dirs: int = 0  # directories whose times were restored


def recover(conn: sqlite3.Connection, pool: str | None = None) -> Recovery:
    """Clean up after a crash. Called with the pool's lock held: every journal row of that pool
    still `copying` belongs to a run that died (rows of other pools may belong to live runs)."""
    rec = Recovery()
    q = ("SELECT j.id, j.dir, j.name, j.tmp, j.orig_ino, j.copy_ino FROM journal j JOIN runs r ON r.id = j.run_id "
         "WHERE j.state IN (?, 'linking')" + (" AND r.pool = ?" if pool is not None else ""))
    rows = conn.execute(q, (OPEN, pool) if pool is not None else (OPEN,)).fetchall()
    done: list[tuple[int, str]] = []
    for jid, d, name, tmp, orig_ino, copy_ino in rows:
        links = conn.execute("SELECT dir, name FROM journal_links WHERE journal_id = ? ORDER BY idx", (jid,)).fetchall()
        if links:
            note = _recover_group([(bytes(a), bytes(b)) for a, b in links], orig_ino, copy_ino, rec)
        else:
            note = _recover_one(bytes(d), bytes(name), bytes(tmp), orig_ino, rec)
        done.append((jid, note))
    if done:
        with atomic(conn):
            conn.executemany("UPDATE journal SET state = 'recovered', reason = ? WHERE id = ?", [(n, j) for j, n in done])
    rec.rows = len(done)
    # directories a dead run was inside: give them back the times they had
    dirs = conn.execute(
        "SELECT d.run_id, d.path, d.ino, d.atime_ns, d.mtime_ns FROM rebalance_dirs d JOIN runs r ON r.id = d.run_id "
        "WHERE d.state = 'started'" + (" AND r.pool = ?" if pool is not None else ""),
        (pool,) if pool is not None else (),
    ).fetchall()
    for run_id, path, ino, atime_ns, mtime_ns in dirs:
        st = _lstat(bytes(path))
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_ino == ino:
            os.utime(bytes(path), ns=(atime_ns, mtime_ns), follow_symlinks=False)
            fd = os.open(bytes(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)  # durable before the journal stops naming the directory
            finally:
                os.close(fd)
            rec.dirs += 1
    if dirs:
        with atomic(conn):
            conn.executemany("UPDATE rebalance_dirs SET state = 'interrupted' WHERE run_id = ? AND path = ?",
                             [(d[0], d[1]) for d in dirs])
    return rec


def _lstat(path: bytes) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _recover_one(d: bytes, name: bytes, tmp: bytes, orig_ino: int, rec: Recovery) -> str:
    path = os.path.join(d, name)
    tpath = os.path.join(d, tmp)
    opath = os.path.join(d, old_name(orig_ino))
    cur = _lstat(path)
    t = _lstat(tpath)
    o = _lstat(opath)
    notes = []
    # The copy under its temp name: incomplete, or complete but never renamed. The name still holds
    # the original (or the user deleted or replaced the file meanwhile): the copy is not needed.
    if t is not None:
        if stat.S_ISREG(t.st_mode) and t.st_ino != orig_ino:
            os.unlink(tpath)
            rec.removed.append(os.fsdecode(tpath))
            notes.append("unfinished copy removed")
        else:
            rec.left.append(os.fsdecode(tpath))
            notes.append("temp name holds an unknown file: left alone")
    # The original's second name, made for the instant of the swap. Remove the name only: the
    # inode is either still the file (the swap did not happen) or was replaced by the verified copy.
    if o is not None:
        if stat.S_ISREG(o.st_mode) and o.st_ino == orig_ino:
            os.unlink(opath)
            rec.removed.append(os.fsdecode(opath))
            notes.append("second name of the original removed")
        else:
            rec.left.append(os.fsdecode(opath))
            notes.append("old name holds an unknown file: left alone")
    if cur is None:
        notes.append("file no longer exists")
    elif cur.st_ino == orig_ino:
        notes.append("original in place (not rewritten)")
    else:
        notes.append("rewritten copy in place")
    return "; ".join(notes)


def _recover_group(names: list[tuple[bytes, bytes]], orig_ino: int, copy_ino: int | None, rec: Recovery) -> str:
    """A hardlink group caught half-way. If any name already points at the verified copy, finish
    switching the others to it (the copy is complete: it was verified before any switch); else
    the group is untouched and only the temp names go."""
    paths = [os.path.join(d, n) for d, n in names]
    temps = [os.path.join(names[0][0], tmp_name(orig_ino))] + [
        os.path.join(d, group_tmp_name(orig_ino, k)) for k, (d, _n) in enumerate(names) if k
    ]
    anchor = os.path.join(names[0][0], old_name(orig_ino))
    at = {p: _lstat(p) for p in paths}
    switched = [p for p, st in at.items() if st is not None and copy_ino is not None and st.st_ino == copy_ino]
    note = "group untouched"
    if switched:
        source = switched[0]
        for k, p in enumerate(paths):
            st = at[p]
            if st is not None and st.st_ino == orig_ino:
                t = os.path.join(os.path.dirname(p), group_tmp_name(orig_ino, k + 2000))
                os.link(source, t, follow_symlinks=False)
                os.rename(t, p)
        note = f"group finished: {len(paths)} names on the verified copy"
    for t in temps:
        st = _lstat(t)
        if st is None:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_ino in (copy_ino, orig_ino) or (copy_ino is None and st.st_ino != orig_ino):
            os.unlink(t)
            rec.removed.append(os.fsdecode(t))
        else:
            rec.left.append(os.fsdecode(t))
    st = _lstat(anchor)
    if st is not None:
        if stat.S_ISREG(st.st_mode) and st.st_ino == orig_ino:
            os.unlink(anchor)
            rec.removed.append(os.fsdecode(anchor))
        else:
            rec.left.append(os.fsdecode(anchor))
    return note
