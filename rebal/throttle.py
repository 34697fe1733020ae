"""A byte-rate limit shared by every worker of a run (a rebalance's copies, a replication's stream)."""

from __future__ import annotations

import threading
import time


class Throttle:
    """A shared byte-rate limit (token bucket, 1 s burst) for all workers; ``rate`` None: no limit."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def consume(self, n: int, stop: threading.Event) -> None:
        """Account ``n`` bytes; wait (ending early when ``stop`` is set) where they ran ahead of the rate."""
        if not self.rate:
            return
        with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now - 1.0) + n / self.rate
            wait = self._next - now
        if wait > 0:
            stop.wait(wait)
