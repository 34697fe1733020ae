"""Futures, `wait` and a thread pool for the `zfs rewrite` path, without `concurrent.futures`.

Why: `concurrent.futures` imports `logging` (and with it `traceback`, `string`, `weakref`): about
75 ms of a rewrite run's start in the lane's OpenZFS guest, where the whole fixed cost of a
4,000-file `rebal rebalance --all` is about 1.3 s against bare `zfs rewrite`'s 2.2-2.6 s (issue 19).
The rewrite path uses a small part of it: a Future set once (result or exception), `done`,
`result`, `cancel` of one not started, `wait` for the first or for all (with a timeout), and a pool
of at most N threads taking submitted calls in order. That part is here, with the standard
library's semantics for it (tests/unit/test_tasks.py holds the two to the same behaviour). The copy
path keeps `concurrent.futures`: its workers and their batches are not on a start-up budget.
"""

from __future__ import annotations

import threading
import time
from _queue import SimpleQueue

FIRST_COMPLETED = "FIRST_COMPLETED"
ALL_COMPLETED = "ALL_COMPLETED"
_PENDING, _RUNNING, _CANCELLED, _FINISHED = "pending", "running", "cancelled", "finished"


class InvalidStateError(Exception):
    """A Future set twice."""


class CancelledError(Exception):
    """The result of a Future cancelled before it ran."""


class Future:
    __slots__ = ("_cond", "_state", "_result", "_exc", "_waiters")

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._state = _PENDING
        self._result = None
        self._exc: BaseException | None = None
        self._waiters: list[threading.Event] = []

    def done(self) -> bool:
        return self._state in (_FINISHED, _CANCELLED)

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def cancel(self) -> bool:
        """Cancel a call not yet started; False once it runs or has run."""
        with self._cond:
            if self._state in (_RUNNING, _FINISHED):
                return False
            if self._state == _PENDING:
                self._state = _CANCELLED
                self._wake()
            return True

    def _start(self) -> bool:
        with self._cond:
            if self._state == _CANCELLED:
                return False
            self._state = _RUNNING
            return True

    def set_result(self, value) -> None:
        self._set(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._set(None, exc)

    def _set(self, value, exc: BaseException | None) -> None:
        with self._cond:
            if self._state in (_FINISHED, _CANCELLED):
                raise InvalidStateError(f"the future is {self._state} already")
            self._result, self._exc, self._state = value, exc, _FINISHED
            self._wake()

    def _wake(self) -> None:
        self._cond.notify_all()
        for w in self._waiters:
            w.set()

    def result(self, timeout: float | None = None):
        with self._cond:
            if not self._cond.wait_for(self.done, timeout):
                raise TimeoutError(f"no result within {timeout} s")
            if self._state == _CANCELLED:
                raise CancelledError()
            if self._exc is not None:
                raise self._exc
            return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        with self._cond:
            if not self._cond.wait_for(self.done, timeout):
                raise TimeoutError(f"no result within {timeout} s")
            if self._state == _CANCELLED:
                raise CancelledError()
            return self._exc


def wait(fs, timeout: float | None = None, return_when: str = ALL_COMPLETED) -> tuple[set, set]:
    """(done, not done) once the first of ``fs`` is done (FIRST_COMPLETED) or all are, or after
    ``timeout`` seconds, as concurrent.futures.wait."""
    fs = set(fs)
    woken = threading.Event()
    for f in fs:
        with f._cond:
            f._waiters.append(woken)
    try:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = {f for f in fs if f.done()}
            if len(done) == len(fs) or (done and return_when == FIRST_COMPLETED):
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            woken.wait(left)
            woken.clear()  # (a future done between the wake and here is seen by the next look)
        return done, fs - done
    finally:
        for f in fs:
            with f._cond:
                f._waiters.remove(woken)


class Pool:
    """At most ``workers`` threads, started as calls are submitted and none is idle, running the
    calls in the order submitted; leaving the ``with`` block waits for every call submitted."""

    def __init__(self, workers: int, name: str = "rebal-task") -> None:
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self._max, self._name = workers, name
        self._queue: SimpleQueue = SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a pool that was shut down")
            f = Future()
            self._queue.put((f, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
        return f

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.put(None)  # (the next worker's end too)
                return
            f, fn, args, kwargs = item
            if f._start():
                try:
                    value = fn(*args, **kwargs)
                except BaseException as e:  # noqa: BLE001  (as concurrent.futures: the caller's result() raises it)
                    f.set_exception(e)
                else:
                    f.set_result(value)
            del item, f, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown(wait=True)
