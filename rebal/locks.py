"""One run of a kind at a time: flock on a file beside the state database. The kernel drops the lock
when the process dies, so a lock left by a dead process is never mistaken for a running one."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable

from .errors import RebalError


class LockedError(RebalError):
    exit_code = 4


def lock_path(state_db: str, key: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(state_db)) or ".", f"{key}.lock")


def holder_alive(state_db: str, key: str) -> bool:
    """Whether the process that last took this lock still lives (read without taking the lock, so
    asking never makes a starting run fail). The pid is the one the holder wrote."""
    try:
        with open(lock_path(state_db, key)) as f:
            pid = int(f.read().strip() or 0)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"rebal" in f.read()
    except (OSError, ValueError):
        return False


class FileLock:
    def __init__(self, state_db: str, key: str, what: str) -> None:
        self.path = lock_path(state_db, key)
        self.what = what
        self.fd = -1

    def __enter__(self) -> FileLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise LockedError(f"another {self.what} is running (pid {holder})") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def check_free(self) -> None:
        """Raise LockedError now if another process holds it (taken and let go at once): a refusal
        before the slow part and before anything is said of what that run is doing."""
        with self:
            pass


_held = threading.local()  # the together- keys this thread holds (a nested Together takes them again)


class Together:
    """Rebalance and replication of overlapping data take turns: each holds ``together-<job>`` for
    every replication job involved while it runs, and waits (blocking, in key order, so two waiters
    never deadlock) while the other holds it. A rebalance's copies then go into one replication run
    whole, and the replication's snapshot is never taken half way through a rewrite.
    ``on_wait(text)`` is told once per key it waits for; ``stop`` ends the wait (LockedError).
    Within one thread it nests: keys the thread already holds are not taken twice (a verify holds
    its job's key around the replication run it makes and the compare after it)."""

    def __init__(self, state_db: str, jobs: list[str], what: str, *, stop: threading.Event | None = None,
                 on_wait: Callable[[str], None] | None = None,
                 timeout: float | None = None) -> None:
        self.paths = [lock_path(state_db, f"together-{j}") for j in sorted(set(jobs))]
        self.what, self.stop, self.on_wait, self.timeout = what, stop, on_wait, timeout
        self.fds: list[int] = []
        self.mine: list[str] = []

    def __enter__(self) -> Together:
        import time

        held = _held.__dict__.setdefault("paths", set())
        try:
            for path in self.paths:
                if path in held:
                    continue
                held.add(path)
                self.mine.append(path)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self.fds.append(fd)
                told, t0 = False, time.monotonic()
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        pass
                    if not told and self.on_wait:
                        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another run"
                        self.on_wait(f"{self.what} waits for {holder} to finish")
                        told = True
                    if self.stop is not None and self.stop.is_set():
                        raise LockedError(f"{self.what}: stopped while waiting for {os.path.basename(path)}")
                    if self.timeout is not None and time.monotonic() - t0 > self.timeout:
                        raise LockedError(f"{self.what}: waited {self.timeout:.0f} s for {os.path.basename(path)}")
                    time.sleep(0.5)  # waiting for another process's run: flock has no timed wait
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"the {self.what} (pid {os.getpid()})\n".encode(), 0)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        held = _held.__dict__.setdefault("paths", set())
        for path in self.mine:
            held.discard(path)
        self.mine = []
