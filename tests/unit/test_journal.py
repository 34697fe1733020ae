"""Recovery from every state a crash can leave a file in (made by hand on a real tmpfs)."""

import os

import pytest
from fsenv import temp_leftovers

from rebal import state
from rebal.rebalance import journal
from rebal.rebalance.copier import FileRef, old_name, tmp_name


class Conn:
    def __init__(self, path):
        self.db = state.connect(path)
        self.run_id = state.start_run(self.db, "rebalance", pool="p")

    def __getattr__(self, name):
        return getattr(self.db, name)


@pytest.fixture
def conn(tmp_path):
    return Conn(tmp_path / "s.db")


def setup_file(d, name=b"f", data=b"original"):
    p = os.path.join(os.fsencode(d), name)
    with open(p, "wb") as f:
        f.write(data)
    st = os.lstat(p)
    return p, FileRef.from_stat(os.fsencode(d), name, st)


def begin(conn, ref):
    [jid] = journal.begin_batch(conn.db, conn.run_id, [ref])
    return jid


def test_crash_before_the_copy_exists(richfs, conn):
    p, ref = setup_file(richfs)
    begin(conn, ref)
    rec = journal.recover(conn.db)
    assert rec.rows == 1 and rec.removed == [] and open(p, "rb").read() == b"original"


def test_crash_with_a_partial_copy(richfs, conn):
    p, ref = setup_file(richfs)
    begin(conn, ref)
    with open(os.path.join(os.fsencode(richfs), tmp_name(ref.ino)), "wb") as f:
        f.write(b"orig")  # half written
    rec = journal.recover(conn.db)
    assert len(rec.removed) == 1 and temp_leftovers(richfs) == []
    assert open(p, "rb").read() == b"original" and os.lstat(p).st_ino == ref.ino


def test_crash_after_the_second_name_before_the_rename(richfs, conn):
    p, ref = setup_file(richfs)
    begin(conn, ref)
    d = os.fsencode(richfs)
    with open(os.path.join(d, tmp_name(ref.ino)), "wb") as f:
        f.write(b"original")
    os.link(p, os.path.join(d, old_name(ref.ino)))
    rec = journal.recover(conn.db)
    assert len(rec.removed) == 2 and temp_leftovers(richfs) == []
    assert os.lstat(p).st_ino == ref.ino and os.lstat(p).st_nlink == 1


def test_crash_after_the_rename(richfs, conn):
    p, ref = setup_file(richfs)
    begin(conn, ref)
    d = os.fsencode(richfs)
    t = os.path.join(d, tmp_name(ref.ino))
    with open(t, "wb") as f:
        f.write(b"original")
    os.link(p, os.path.join(d, old_name(ref.ino)))
    os.rename(t, p)  # the copy is in place; the original still has its second name
    new_ino = os.lstat(p).st_ino
    rec = journal.recover(conn.db)
    assert len(rec.removed) == 1 and temp_leftovers(richfs) == []
    assert os.lstat(p).st_ino == new_ino and open(p, "rb").read() == b"original"
    note = conn.execute("SELECT reason FROM journal").fetchone()[0]
    assert "rewritten copy in place" in note


def test_file_deleted_by_the_user_is_not_resurrected(richfs, conn):
    p, ref = setup_file(richfs)
    begin(conn, ref)
    d = os.fsencode(richfs)
    with open(os.path.join(d, tmp_name(ref.ino)), "wb") as f:
        f.write(b"original")
    os.unlink(p)
    journal.recover(conn.db)
    assert not os.path.exists(p) and temp_leftovers(richfs) == []


def test_unknown_file_under_the_old_name_is_left_alone(richfs, conn):
    p, ref = setup_file(richfs)
    begin(conn, ref)
    other = os.path.join(os.fsencode(richfs), old_name(ref.ino))
    with open(other, "wb") as f:
        f.write(b"someone else's")
    rec = journal.recover(conn.db)
    assert rec.left == [os.fsdecode(other)] and open(other, "rb").read() == b"someone else's"


def test_finished_rows_are_not_recovered_twice(richfs, conn):
    p, ref = setup_file(richfs)
    jid = begin(conn, ref)
    journal.finish_batch(conn.db, [(jid, "swapped", "", 99)])
    assert journal.recover(conn.db).rows == 0
    assert conn.execute("SELECT count(*) FROM journal").fetchone()[0] == 0  # swapped rows are dropped


def test_done_dirs(richfs, conn):
    d = os.fsencode(richfs)
    a, b = os.path.join(d, b"a\xff"), os.path.join(d, b"b")
    os.mkdir(a)
    os.mkdir(b)
    os.utime(a, ns=(1_000_000_000_111, 2_000_000_000_222))
    journal.start_dir(conn.db, conn.run_id, a, os.lstat(a))
    journal.start_dir(conn.db, conn.run_id, b, os.lstat(b))
    journal.end_dir(conn.db, conn.run_id, b, 3, 300, done=True)
    assert journal.done_dirs(conn.db, conn.run_id) == {b}
    os.utime(a, ns=(5, 5))  # the dead run's renames moved the times
    rec = journal.recover(conn.db)
    assert rec.dirs == 1 and os.lstat(a).st_mtime_ns == 2_000_000_000_222
    assert journal.done_dirs(conn.db, conn.run_id) == {b}


def test_half_switched_hardlink_group_is_finished(richfs, conn):
    from rebal.rebalance.copier import group_tmp_name

    d = os.fsencode(richfs)
    a, b, c = (os.path.join(d, n) for n in (b"a", b"b", b"c"))
    with open(a, "wb") as f:
        f.write(b"linked data")
    os.link(a, b)
    os.link(a, c)
    refs = [FileRef.from_stat(d, os.path.basename(p), os.lstat(p)) for p in (a, b, c)]
    orig = refs[0].ino
    jid = journal.begin_group(conn.db, conn.run_id, refs)
    # the state a crash leaves: verified copy under its temp names, anchor made, name a switched
    t0 = os.path.join(d, tmp_name(orig))
    with open(t0, "wb") as f:
        f.write(b"linked data")
    copy_ino = os.lstat(t0).st_ino
    for k in (1, 2):
        os.link(t0, os.path.join(d, group_tmp_name(orig, k)))
    journal.group_copied(conn.db, jid, copy_ino)
    os.link(a, os.path.join(d, old_name(orig)))
    os.rename(t0, a)
    rec = journal.recover(conn.db)
    assert {os.lstat(p).st_ino for p in (a, b, c)} == {copy_ino}
    assert os.lstat(a).st_nlink == 3 and temp_leftovers(richfs) == []
    assert rec.rows == 1


def test_untouched_hardlink_group_only_loses_temps(richfs, conn):
    from rebal.rebalance.copier import group_tmp_name

    d = os.fsencode(richfs)
    a, b = os.path.join(d, b"a"), os.path.join(d, b"b")
    with open(a, "wb") as f:
        f.write(b"x")
    os.link(a, b)
    refs = [FileRef.from_stat(d, os.path.basename(p), os.lstat(p)) for p in (a, b)]
    orig = refs[0].ino
    jid = journal.begin_group(conn.db, conn.run_id, refs)
    t0 = os.path.join(d, tmp_name(orig))
    with open(t0, "wb") as f:
        f.write(b"x")
    os.link(t0, os.path.join(d, group_tmp_name(orig, 1)))
    journal.group_copied(conn.db, jid, os.lstat(t0).st_ino)
    os.link(a, os.path.join(d, old_name(orig)))
    journal.recover(conn.db)
    assert {os.lstat(p).st_ino for p in (a, b)} == {orig} and os.lstat(a).st_nlink == 2
    assert temp_leftovers(richfs) == []


def test_recovery_leaves_other_pools_runs_alone(richfs, tmp_path):
    """Two pools, one state database: the rebalance of one must not clean up the other's live run."""
    db = state.connect(tmp_path / "two.db")
    mine = state.start_run(db, "rebalance", pool="a")
    other = state.start_run(db, "rebalance", pool="b")
    pa, ra = setup_file(richfs, b"fa")
    pb, rb_ = setup_file(richfs, b"fb")
    journal.begin_batch(db, mine, [ra])
    journal.begin_batch(db, other, [rb_])
    d = os.fsencode(richfs)
    for r in (ra, rb_):
        with open(os.path.join(d, tmp_name(r.ino)), "wb") as f:
            f.write(b"partial")
    rec = journal.recover(db, "a")
    assert rec.rows == 1
    assert not os.path.exists(os.path.join(d, tmp_name(ra.ino)))
    assert os.path.exists(os.path.join(d, tmp_name(rb_.ino))), "pool b's copy in flight was touched"
