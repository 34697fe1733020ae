"""Method rewrite on real zfs-fuse pools, batch by batch. zfs-fuse has no `zfs rewrite`: detection
replays the usage text real OpenZFS 2.4.4 printed, and each `zfs rewrite -v` process is replayed
from what the real one prints (fixture rewrite-v-mixed: each regular file named on a line in the
order handed, "failed to stat P: ..." for a missing one, other kinds passed over). The pool, the tree,
the scan, the state database and the journal are real; on real OpenZFS the lane runs the command."""

import os
import stat
import threading

import pytest
from treegen import mixed_tree
from zfsenv import sh

from rebal import state
from rebal.rebalance import engine
from rebal.rebalance.options import Options
from rebal.rebalance.prepare import prepare
from rebal.rebalance.runstate import Run
from rebal.transport import Here
from rebal.zfs.host import ZfsHost
from rebal.zfs.host_fs import parse_rewrite_answer

pytestmark = pytest.mark.zfs


class ReplayZfs(ZfsHost):
    """zfs-fuse's zfs and zpool, with `zfs rewrite -v` replayed: answers as the real command does;
    ``stop_after``: after that many files in all, the run's stop is set and the process 'ends' on
    SIGTERM (exit -15). Its zpool says what OpenZFS 2.4's does of `physical_rewrite` (zfs-fuse's
    `zpool list` has no -j, so the features are asked on their own: `pool_features`)."""

    def __init__(self, stop_after=None):
        super().__init__(Here())
        self.handed: list[list[bytes]] = []
        self.answered: list[bytes] = []
        self.stop_after = stop_after
        self.lock = threading.Lock()

    def rewrite_support(self):
        from conftest import fixture_text

        from rebal.zfs.host_fs import parse_rewrite_usage

        return parse_rewrite_usage(fixture_text("zfs-rewrite-noargs.txt.stderr"))

    def rewrite(self, paths, physical, stop, on_out=None):
        assert physical and all(p.startswith(b"/") for p in paths)
        out, err, rc = [], [], 0
        with self.lock:
            self.handed.append(list(paths))
            for p in paths:
                if self.stop_after is not None and len(self.answered) >= self.stop_after:
                    stop.set()
                    rc = -15
                    break
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    err.append(f"failed to stat {os.fsdecode(p)}: No such file or directory\n")
                    rc = 2
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append(os.fsdecode(p) + "\n")
                    self.answered.append(p)
                    if on_out is not None:  # the real command's -v line, as it comes
                        on_out(p + b"\n")
        return parse_rewrite_answer("".join(out), "".join(err), paths, rc)

    def pool_features(self, pool_name, features):
        return {"physical_rewrite": "enabled"} if "physical_rewrite" in features else {}




def grown(make_pool, small=120, seed=9):
    pool = make_pool([[], []], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    mixed_tree(data, small=small, large=2, large_mib=(6, 8), seed=seed)
    pool.add(str(pool.disk("128M")), str(pool.disk("128M")))
    return pool, data


def run(pool, tmp_path, zfs, stop=None, **kw):
    conn = state.connect(tmp_path / "s.db")
    kw.setdefault("jobs", 1)
    opts = Options(targets=[f"{pool.name}/data"], target_spread=0.01, rewrite_all=True, listing=True, **kw)
    prep = prepare(opts, zfs, conn)
    assert prep.method == "rewrite" and prep.physical
    rep = engine.execute(prep, opts, zfs, conn, str(tmp_path / "s.db"), stop=stop)
    return prep, rep, conn


def test_every_eligible_file_once_in_one_process(make_pool, tmp_path):
    pool, _data = grown(make_pool)
    zfs = ReplayZfs()
    prep, rep, _conn = run(pool, tmp_path, zfs)
    assert rep.outcome == "ok", rep
    files = [p for part in zfs.handed for p in part]
    # hardlinked files are rewritten in place too (once per inode); symlinks and the fifo are not
    assert len(files) == len(set(files)) == prep.scan.files - 2 == rep.files
    assert len({os.lstat(f).st_ino for f in files}) == len(files)
    assert not any(f.endswith((b"a-fifo", b"link-to-file", b"dangling")) for f in files)
    # the awkward names (a newline, bytes that are not UTF-8) are named back and counted
    assert any(b"\n" in f for f in files) and any(b"\xff" in f for f in files)
    assert len(zfs.handed) == 1, "a small tree is one batch: one process, not one per directory"
    assert rep.dirs == len(prep.scan.dirs) and not rep.skipped
    # the reason gives the spread measured after the run, not the one before it
    assert rep.reason == f"every eligible file was rewritten (--all); the spread is now {rep.spread_after:.1f}"


def test_a_stop_inside_a_batch_leaves_the_unanswered_directories_for_the_next_run(make_pool, tmp_path):
    pool, data = grown(make_pool, small=300, seed=4)
    # files are handed in inode order, which mixes the directories: stop a little before the end,
    # so that some directories were answered whole and some were not
    stop_after = len(regular_inodes(data)) - 12
    first = ReplayZfs(stop_after=stop_after)
    stop = threading.Event()
    prep, rep, conn = run(pool, tmp_path, first, stop=stop)
    assert rep.outcome == "interrupted" and rep.files == stop_after, rep
    handed = [p for part in first.handed for p in part]
    answered = set(first.answered)
    done = state_done(conn, rep.run_id)
    # a directory is done exactly when every file of it handed to zfs was answered
    for d in {os.path.dirname(p) for p in handed}:
        mine = [p for p in handed if os.path.dirname(p) == d]
        assert (d in done) == all(p in answered for p in mine), d
    assert done and len(done) < len(prep.scan.dirs)

    second = ReplayZfs()
    prep2, rep2, _conn = run(pool, tmp_path, second)
    assert prep2.resume_run == rep.run_id and rep2.outcome == "ok", rep2
    again = [p for part in second.handed for p in part]
    # nothing of a done directory again; every file the stop left is rewritten now
    assert not any(os.path.dirname(p) in done for p in again)
    assert set(handed) - answered <= set(again)
    assert answered | set(again) == set(handed) | set(again)
    assert rep2.dirs == len(prep.scan.dirs) - len(done)


def test_max_bytes_cuts_a_directory_and_the_next_run_finishes_it(make_pool, tmp_path):
    pool, _data = grown(make_pool, small=200, seed=5)
    zfs = ReplayZfs()
    prep, rep, conn = run(pool, tmp_path, zfs, max_bytes=300_000)
    assert rep.outcome == "stopped" and "--max-bytes" in rep.reason, rep
    sizes = [os.lstat(p).st_size for p in zfs.answered]
    # one file past the limit at most (answered in inode order: which one was cut last is not known)
    assert sum(sizes) == rep.bytes and sum(sizes) - max(sizes) < 300_000 <= rep.bytes
    done = state_done(conn, rep.run_id)
    handed = [p for part in zfs.handed for p in part]
    cut = {os.path.dirname(p) for p in handed} - done
    assert len(cut) == 1, "the directory the limit cut is not done"
    rest = ReplayZfs()
    _p, rep2, _c = run(pool, tmp_path, rest)
    again = [p for part in rest.handed for p in part]
    assert rep2.outcome == "ok" and cut <= {os.path.dirname(p) for p in again}
    assert not any(os.path.dirname(p) in done for p in again)
    assert rep.files + rep2.files >= prep.scan.files - 2


def regular_inodes(data) -> set[int]:
    return {st.st_ino for d, _s, fs in os.walk(data) for f in fs if stat.S_ISREG((st := os.lstat(os.path.join(d, f))).st_mode)}


def state_done(conn, run_id) -> set[bytes]:
    from rebal.rebalance import journal

    return {os.fsencode(p) if isinstance(p, str) else p for p in journal.done_dirs(conn, run_id)}


def test_a_zfs_rewrite_that_fails_as_a_whole_fails_the_run_and_marks_nothing_done(make_pool, tmp_path):
    from rebal.errors import RebalError

    class Broken(ReplayZfs):
        def rewrite(self, paths, physical, stop, on_out=None):
            self.handed.append(list(paths))
            return parse_rewrite_answer("", "internal error: failed to initialize ZFS library\n", paths, 1)

    pool, _data = grown(make_pool)
    with pytest.raises(RebalError, match="failed to initialize"):
        run(pool, tmp_path, Broken())
    conn = state.connect(tmp_path / "s.db")
    from rebal.rebalance import journal

    assert conn.execute("SELECT outcome FROM runs ORDER BY id DESC").fetchone()[0] == "failed"
    assert not journal.done_dirs(conn, 1), "a directory nobody rewrote must not be recorded done"


def test_the_lanes_do_not_wait_for_each_other_and_parts_stay_under_the_limits(make_pool, tmp_path, monkeypatch):
    """Two lanes: the first process is held until the other lane has answered most of the files, which
    only a pipeline allows (a split of the work between the lanes fixed in advance, or batches that
    wait for their slowest process, leave the other lane half the files at most: the test fails on
    the timeout). Every part within the file and command-line limits, every file once."""
    from rebal.rebalance import inplace_pass

    monkeypatch.setattr(inplace_pass, "PROC_MIN", 8)
    monkeypatch.setattr(inplace_pass, "PROC_FILES", 40)
    monkeypatch.setattr(inplace_pass, "PROC_ARGV", 3000)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    pool, data = grown(make_pool, small=400, seed=6)
    inodes = regular_inodes(data)
    moved = threading.Condition()
    held: list = []

    class Held(ReplayZfs):
        def rewrite(self, paths, physical, stop, on_out=None):
            with self.lock:
                first, self.began = not getattr(self, "began", False), True
            if first:
                with moved:
                    held.append(moved.wait_for(lambda: len(self.answered) >= 0.6 * len(inodes), timeout=60))
            ans = super().rewrite(paths, physical, stop, on_out)
            with moved:
                moved.notify_all()
            return ans

    zfs = Held()
    prep, rep, _conn = run(pool, tmp_path, zfs, jobs=2)
    assert held == [True], "the other lane did not take over the work: the lanes waited for each other"
    assert rep.outcome == "ok" and rep.dirs == len(prep.scan.dirs), rep
    files = [p for part in zfs.handed for p in part]
    assert len(files) == len(set(files)) == rep.files == len(inodes)
    assert all(len(part) <= 40 and sum(len(p) + 9 for p in part) <= 3000 for part in zfs.handed)
    # each part handed in inode order (dnodes and blocks of files made together lie together)
    for part in zfs.handed:
        inos = [os.lstat(p).st_ino for p in part]
        assert inos == sorted(inos)
    assert any(part != sorted(part) for part in zfs.handed), "the tree's names are not in inode order"
    assert any(sum(len(p) + 9 for p in part) > 3000 - 300 or len(part) == 40 for part in zfs.handed)


def test_the_directories_answered_when_the_target_is_reached_are_recorded_done(make_pool, tmp_path, monkeypatch):
    """One process answers every directory of a small tree at once; the target is reached at the
    first directory the engine looks at. The others were rewritten too: they are recorded done in
    the journal and the report (else the next run would rewrite them again)."""
    pool, data = grown(make_pool, small=200, seed=6)
    calls = []
    monkeypatch.setattr(Run, "target_reached", lambda self: calls.append(1) or True)
    zfs = ReplayZfs()
    conn = state.connect(tmp_path / "s.db")
    opts = Options(targets=[f"{pool.name}/data"], target_spread=0.01, jobs=1)
    prep = prepare(opts, zfs, conn)
    rep = engine.execute(prep, opts, zfs, conn, str(tmp_path / "s.db"))
    assert rep.outcome == "ok" and len(calls) == 1, rep
    assert len(zfs.handed) == 1 and rep.files == len(zfs.answered) == len(zfs.handed[0])
    every = {d.path for d in prep.scan.dirs}
    assert rep.dirs == len(every) > 3
    assert state_done(conn, rep.run_id) == every
    assert sorted(rep.done_dirs) == sorted(every)


@pytest.mark.parametrize("keep", [100000, 60])
def test_the_pre_scan_listing_is_rewritten_without_listing_it_again(make_pool, tmp_path, monkeypatch, keep):
    """The pre-scan keeps the eligible files of its first directories (up to ``keep`` files, the
    rest are listed again when their turn comes); a file removed between the scan and the rewrite
    is counted gone, one put in another's place is rewritten, nothing twice, nothing missed."""
    from rebal.rebalance import prepare as prepare_mod
    from rebal.rebalance import scan as scan_mod

    monkeypatch.setattr(prepare_mod, "AHEAD", keep)
    pool, data = grown(make_pool, small=200, seed=6)
    conn = state.connect(tmp_path / "s.db")
    opts = Options(targets=[f"{pool.name}/data"], target_spread=0.01, rewrite_all=True, jobs=2, listing=True)
    zfs = ReplayZfs()
    assert prepare(Options(targets=opts.targets), zfs, conn).scan.listings == {}  # a plan
    prep = prepare(opts, zfs, conn)
    listed = {d: len(v) for d, v in prep.scan.listings.items()}
    assert listed and sum(listed.values()) <= keep
    if keep < prep.scan.files:
        assert len(listed) < len(prep.scan.dirs)
    first_dir = next(iter(prep.scan.listings))
    names = [n for n, st in prep.scan.listings[first_dir] if st.st_nlink == 1]
    gone, replaced = os.path.join(first_dir, names[0]), os.path.join(first_dir, names[1])
    os.unlink(gone)
    os.unlink(replaced)
    with open(replaced, "wb") as f:
        f.write(b"put in its place after the scan")
    relisted: list[bytes] = []
    real = scan_mod.candidates

    def counting(dirpath, *a, **k):
        relisted.append(dirpath)
        return real(dirpath, *a, **k)

    monkeypatch.setattr(scan_mod, "candidates", counting)
    rep = engine.execute(prep, opts, zfs, conn, str(tmp_path / "s.db"))
    assert rep.outcome == "ok", rep
    assert set(relisted) == {d.path for d in prep.scan.dirs} - set(listed)  # only what was not kept
    handed = [p for part in zfs.handed for p in part]
    assert len(handed) == len(set(handed)) == prep.scan.files - 2  # (the fifo and the symlink)
    assert replaced in zfs.answered
    assert gone not in zfs.answered and rep.skipped == {"gone or replaced since the scan": 1}
    assert rep.files == len(handed) - 1 and rep.dirs == len(prep.scan.dirs)
    assert prep.scan.listings == {}  # handed over, not held for the run


def test_idle_lanes_share_the_files_left_evenly(make_pool, tmp_path, monkeypatch):
    """Two idle lanes and 1,200 files: two processes of 600, not 600 + 300 + ... (each part cut from
    what was left after the one before: more process starts, and a lane idle at the end)."""
    from rebal.rebalance import inplace_pass

    monkeypatch.setattr(inplace_pass.os, "cpu_count", lambda: 2)
    pool = make_pool([[], []], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    for d in range(8):  # 8 directories of 150
        (data / f"d{d}").mkdir()
        for i in range(150):
            (data / f"d{d}" / f"f{i}").write_bytes(b"%d" % i)
    pool.add(str(pool.disk("128M")), str(pool.disk("128M")))
    zfs = ReplayZfs()
    _prep, rep, _conn = run(pool, tmp_path, zfs, jobs=2)
    assert rep.outcome == "ok" and rep.files == 1200, rep
    assert sorted(len(p) for p in zfs.handed) == [600, 600]


@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_progress_is_told_while_a_part_runs_and_adds_up_at_the_end(make_pool, tmp_path, monkeypatch, every):
    """A part runs for many seconds on a big tree: the run tells how far `-v` has got while it
    runs (the terminal's bar and --json's "progress" events), not only when the part ends: as soon
    as the first files are named, then every PROGRESS_EVERY seconds. The process here names half its
    files, then waits until the run has told them (every 0 s: all of them; every hour: the first
    ones, at once); the last figures told are the report's."""
    from rebal.rebalance import inplace_pass

    monkeypatch.setattr(inplace_pass, "PROGRESS_EVERY", every)
    pool, data = grown(make_pool, small=200, seed=3)
    told: list[tuple[int, int]] = []
    seen = threading.Condition()

    class Events(engine.LogEvents):
        def progress(self, files, nbytes):
            with seen:
                told.append((files, nbytes))
                seen.notify_all()

    class Halfway(ReplayZfs):
        def rewrite(self, paths, physical, stop, on_out=None):
            half = len(paths) // 2
            first = super().rewrite(paths[:half], physical, stop, on_out)
            need = len(first.done) if every == 0 else 1
            with seen:  # the run must tell these while this process still runs
                self.waited = seen.wait_for(lambda: any(f >= need for f, _b in told), timeout=60)
            rest = super().rewrite(paths[half:], physical, stop, on_out)
            return parse_rewrite_answer("".join(os.fsdecode(p) + "\n" for p in first.done + rest.done), "",
                                        paths, 0)

    zfs = Halfway()
    conn = state.connect(tmp_path / "s.db")
    opts = Options(targets=[f"{pool.name}/data"], target_spread=0.01, rewrite_all=True, jobs=1)
    prep = prepare(opts, zfs, conn)
    rep = engine.execute(prep, opts, zfs, conn, str(tmp_path / "s.db"), events=Events())
    assert rep.outcome == "ok" and zfs.waited, "progress was only told once the process had ended"
    mid = [t for t in told if 0 < t[0] < rep.files]
    # (a name holding a newline is two lines of `-v`: counted twice while its part runs, so the
    # bytes told may reach the total a file early)
    assert mid and all(0 < b <= rep.bytes for _f, b in mid), (told, rep.files, rep.bytes)
    assert told == sorted(told), "the figures only grow"
    assert told[-1] == (rep.files, rep.bytes)
    if every:
        assert len(told) == 2, told  # the first files named, and the end
