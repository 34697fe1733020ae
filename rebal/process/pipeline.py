"""A pipeline of commands, with no shell between them.

`pump`: `zfs send | zstd ... ` on one side, `ssh HOST zfs receive` (or a local `zfs receive`) on the
other, and rebal between the two moving the stream with splice(2): the bytes go through the kernel,
not through Python, so counting them costs next to nothing; a byte-rate limit and a stop request
are honoured between chunks.

`connect`: the gate's pipeline on the backup host, the stages joined by pipes, its first reading
rebal's own stdin and its last writing rebal's own stdout (the ssh channel).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from ..throttle import Throttle
from .command import env, line

log = logging.getLogger(__name__)

CHUNK = 1 << 20


@dataclass
class StreamResult:
    bytes: int
    sender_rc: int
    sender_err: str
    receiver_rc: int
    receiver_err: str
    receiver_out: str
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.sender_rc == 0 and self.receiver_rc == 0 and not self.stopped

    @property
    def said(self) -> str:
        """What went wrong, in words: the receiver's complaint, else the sender's, else how it ended."""
        return ((self.receiver_err or self.sender_err).strip()
                or ("stopped by request" if self.stopped else f"sender exit {self.sender_rc}, receiver exit {self.receiver_rc}"))


def _read(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def _start(argv: list[str], **kw: Any) -> subprocess.Popen:
    log.debug("start: %s", line(argv))
    return subprocess.Popen(argv, env=env(), start_new_session=True, **kw)


def pump(senders: list[list[str]], receiver: list[str], *, throttle: Throttle | None = None,
         stop: threading.Event | None = None, progress: Callable[[int], None] | None = None,
         procs: list[subprocess.Popen] | None = None) -> StreamResult:
    """Run ``senders`` as a pipeline (send | filter ...) and feed its output to ``receiver``.

    ``progress(bytes_so_far)`` is called as data passes. ``procs`` receives the processes started
    (so that a caller can end them on a signal: `kill`)."""
    stop = stop or threading.Event()
    throttle = throttle or Throttle(None)
    errs = [tempfile.TemporaryFile() for _ in senders]
    rerr, rout = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    chain: list[subprocess.Popen] = []
    prev: IO[bytes] | int = subprocess.DEVNULL
    for argv, err in zip(senders, errs):
        p = _start(argv, stdin=prev, stdout=subprocess.PIPE, stderr=err)
        if not isinstance(prev, int):
            prev.close()
        assert p.stdout is not None  # (PIPE)
        prev = p.stdout
        chain.append(p)
    recv = _start(receiver, stdin=subprocess.PIPE, stdout=rout, stderr=rerr)
    if procs is not None:
        procs.extend(chain + [recv])
    out, into = chain[-1].stdout, recv.stdin
    assert out is not None and into is not None  # (PIPE)
    src = out.fileno()
    dst = into.fileno()
    total = 0
    stopped = False
    try:
        while True:
            if stop.is_set():
                stopped = True
                break
            try:
                n = os.splice(src, dst, CHUNK)
            except OSError as e:
                if e.errno == errno.EPIPE:  # the receiver is gone
                    break
                if e.errno == errno.EINTR:
                    continue
                raise
            if n == 0:
                break
            total += n
            throttle.consume(n, stop)
            if progress:
                progress(total)
    finally:
        for p in chain:
            if stopped or recv.poll() is not None:
                kill(p)
        try:
            into.close()
        except OSError:
            pass
        if stopped:
            kill(recv)
        rc_recv = recv.wait()
        if rc_recv != 0:
            for p in chain:
                kill(p)
        rcs = [p.wait() for p in chain]
        out.close()
    sender_rc = next((rc for rc in rcs if rc != 0), 0)
    return StreamResult(
        total, sender_rc, "\n".join(_read(e) for e in errs).strip(), rc_recv, _read(rerr).strip(),
        _read(rout).strip(), stopped,
    )


def kill(p: subprocess.Popen) -> None:
    """SIGTERM to a pipeline process's group, if it still runs."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def connect(stages: list[list[str]], replace_self: bool = True) -> int:
    """Run the stages joined by pipes, rebal's stdin into the first and the last's output to rebal's
    stdout; the exit status of the last stage that failed (0 when none did). One stage replaces
    rebal's own process (nothing of rebal stays between the ssh channel and the command) unless
    ``replace_self`` is false (the caller has work after it). A stage that cannot start: exit 127,
    said on stderr."""
    import sys

    sys.stdout.flush()
    if len(stages) == 1 and replace_self:
        try:
            os.execvp(stages[0][0], stages[0])
        except OSError as e:
            sys.stderr.write(f"rebal gate: cannot run {stages[0][0]}: {e.strerror}\n")
            return 127
    procs: list[subprocess.Popen] = []
    prev = None
    for i, argv in enumerate(stages):
        last = i == len(stages) - 1
        try:
            p = subprocess.Popen(argv, stdin=prev, stdout=None if last else subprocess.PIPE)
        except OSError as e:
            sys.stderr.write(f"rebal gate: cannot run {argv[0]}: {e.strerror}\n")
            for q in procs:
                q.kill()
            return 127
        if prev is not None:
            prev.close()
        prev = p.stdout
        procs.append(p)
    rcs = [p.wait() for p in procs]
    return next((rc for rc in reversed(rcs) if rc != 0), 0)
