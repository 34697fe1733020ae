"""Move a stream from one process to another, counting the bytes: `zfs send` -> rebal -> `ssh ... zfs
receive`. The bytes go through the kernel with splice(2) (no copy into Python), so counting them
costs next to nothing; a byte-rate limit and a stop request are honoured between chunks.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import tempfile
import threading

from ..rebalance.files import Throttle
from dataclasses import dataclass

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


def _read(f) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def pump(senders: list[list[str]], receiver: list[str], *, throttle: Throttle | None = None,
         stop: threading.Event | None = None, progress=None, procs: list | None = None) -> StreamResult:
    """Run ``senders`` as a pipeline (send | filter ...) and feed its output to ``receiver``.

    ``progress(bytes_so_far)`` is called as data passes. ``procs`` receives the processes started
    (so that a caller can kill them on a signal).
    """
    stop = stop or threading.Event()
    throttle = throttle or Throttle(None)
    errs = [tempfile.TemporaryFile() for _ in senders]
    rerr, rout = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    chain: list[subprocess.Popen] = []
    prev = subprocess.DEVNULL
    for argv, err in zip(senders, errs):
        p = subprocess.Popen(argv, stdin=prev, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        if prev is not subprocess.DEVNULL:
            prev.close()
        prev = p.stdout
        chain.append(p)
    recv = subprocess.Popen(receiver, stdin=subprocess.PIPE, stdout=rout, stderr=rerr, start_new_session=True)
    if procs is not None:
        procs.extend(chain + [recv])
    src = chain[-1].stdout.fileno()
    dst = recv.stdin.fileno()
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
                _kill(p)
        try:
            recv.stdin.close()
        except OSError:
            pass
        if stopped:
            _kill(recv)
        rc_recv = recv.wait()
        if rc_recv != 0:
            for p in chain:
                _kill(p)
        rcs = [p.wait() for p in chain]
        chain[-1].stdout.close()
    sender_rc = next((rc for rc in rcs if rc != 0), 0)
    return StreamResult(
        total, sender_rc, "\n".join(_read(e) for e in errs).strip(), rc_recv, _read(rerr).strip(),
        _read(rout).strip(), stopped,
    )


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
