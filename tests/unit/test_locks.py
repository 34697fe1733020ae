import os
import subprocess
import sys

import pytest

from rebal.locks import FileLock, LockedError


def test_second_holder_is_refused_and_a_dead_holder_frees_the_lock(tmp_path):
    db = str(tmp_path / "state.db")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; sys.path.insert(0, sys.argv[1]); from rebal.locks import FileLock; "
         "l = FileLock(sys.argv[2], 'replicate-j', 'run'); l.__enter__(); print('locked', flush=True); "
         "sys.stdin.read()", os.getcwd(), db],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(LockedError, match=f"pid {holder.pid}"):
        with FileLock(db, "replicate-j", "run of replication job j"):
            pass
    holder.kill()  # dies without unlocking, as with kill -9 or a crash
    holder.wait()
    with FileLock(db, "replicate-j", "run"):
        pass


def test_together_nests_within_a_thread_and_not_across_threads(tmp_path):
    """A verify holds its job's key around the replication run it makes (which takes the key too):
    within one thread the inner one goes through; another thread still waits until the outer ends."""
    import threading

    from rebal.locks import Together

    db = str(tmp_path / "state.db")

    def other_thread_gets_it() -> bool:
        got = []

        def take():
            try:
                with Together(db, ["a"], "other", timeout=0.6):
                    got.append(True)
            except LockedError:
                got.append(False)
        t = threading.Thread(target=take)
        t.start()
        t.join()
        return got[0]

    with Together(db, ["a"], "verify of job a"):
        with Together(db, ["a", "b"], "replication job a", timeout=0):
            assert not other_thread_gets_it()
        assert not other_thread_gets_it()  # the outer still holds it
    assert other_thread_gets_it()
