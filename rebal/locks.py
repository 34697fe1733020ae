"""One run of a kind at a time: flock on a file beside the state database. The kernel drops the lock
when the process dies, so a lock left by a dead process is never mistaken for a running one."""

from __future__ import annotations

import fcntl
import os

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

    def __exit__(self, *exc) -> None:
        os.close(self.fd)
