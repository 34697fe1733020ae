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
