"""One owner of a run's record: `with recorded(conn, kind, job=...) as run:` starts the row, and ends
it with the run's outcome (an `Outcome`), its details and its error, whatever way the block ends: an
exception is a failure (Ctrl-C or SIGTERM: interrupted) and is raised on."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import state
from .outcome import Outcome

__all__ = ["Outcome", "Run", "recorded"]


@dataclass
class Run:
    id: int | None  # None: not recorded (a dry run)
    outcome: Outcome = Outcome.OK
    details: dict = field(default_factory=dict)
    error: str | None = None


@contextmanager
def recorded(conn: sqlite3.Connection | None, kind: str, *, job: str | None = None, pool: str | None = None, key: str | None = None,
             dry_run: bool = False, resume: int | None = None) -> Iterator[Run]:
    """The block's run, recorded (nothing is, for a dry run). Set ``run.outcome``, ``run.details`` and
    ``run.error`` in the block; an exception ends the row as failed (interrupted for a stop) with
    what was set so far. ``resume``: the id of an earlier run that this one continues (a rebalance
    cut short): its row is running again, and ends with this block."""
    if dry_run:
        run = Run(None)
    elif conn is None:
        raise ValueError("a recorded run needs the state database (or dry_run)")
    elif resume is not None:
        state.reopen_run(conn, resume)
        run = Run(resume)
    else:
        run = Run(state.start_run(conn, kind, job=job, pool=pool, key=key))
    t0 = time.monotonic()

    def end(outcome: Outcome, error: str | None) -> None:
        if run.id is not None and conn is not None:
            state.end_run(conn, run.id, Outcome(outcome), error=error,
                          details={"seconds": round(time.monotonic() - t0, 2)} | run.details)

    try:
        yield run
    except KeyboardInterrupt as e:
        end(Outcome.INTERRUPTED, str(e) or "stopped by a signal")
        raise
    except BaseException as e:
        end(Outcome.FAILED, str(e) or type(e).__name__)
        raise
    end(run.outcome, run.error)
