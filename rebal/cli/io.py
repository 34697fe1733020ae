"""What every command shares: the global options, loading the config and the state database, writing
output and warnings, the guard that turns a RebalError into one line on stderr and its exit code,
and signals as a stop flag."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from ..errors import RebalError
from ..outcome import Outcome

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config


@dataclass
class Options:
    config: str | None = None
    debug: bool = False


OPTS = Options()


def load_config(check_cron: bool = False):
    from .. import config

    return config.load(OPTS.config, check_cron=check_cron)


def open_state(cfg: Config):
    from .. import state

    return state.connect(cfg.state_db)


def state_or_none(cfg: Config, why: str = "the plan cannot see unfinished runs"):
    try:
        return open_state(cfg)
    except RebalError as e:
        warn(f"{e} ({why})")
        return None


def out_json(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def out_text(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def warn(msg: str) -> None:
    print(f"rebal: warning: {msg}", file=sys.stderr)


def say_error(msg: str) -> None:
    """A failure the command reports itself (its exit code follows): one line on stderr."""
    print(f"rebal: error: {msg}", file=sys.stderr)


def guarded(call: Callable[[], object]) -> None:
    """Run ``call``; a RebalError becomes "rebal: error: ..." and its exit code, ^C exit 130, and a
    bug one plain line (its traceback only with --debug or REBAL_DEBUG)."""
    try:
        call()
    except RebalError as e:
        if OPTS.debug:
            import traceback

            traceback.print_exc()
        for line in str(e).splitlines() or [type(e).__name__]:
            print(f"rebal: error: {line}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("rebal: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # a bug: say so plainly, traceback only with --debug
        if OPTS.debug or os.environ.get("REBAL_DEBUG"):
            raise
        print(f"rebal: internal error: {type(e).__name__}: {e} (run with --debug for details)", file=sys.stderr)
        sys.exit(70)  # EX_SOFTWARE


class Signals:
    """SIGINT/SIGTERM set a stop flag (the running step ends at a safe point) instead of killing
    the process, for as long as the `with` block lasts; `got` lists the signals received."""

    def __init__(self) -> None:
        import threading

        self.stop = threading.Event()
        self.got: list[int] = []
        self._old: dict = {}

    def _on(self, signum: int, _frame: FrameType | None) -> None:
        self.got.append(signum)
        self.stop.set()

    def __enter__(self) -> "Signals":
        import signal

        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        for s, h in self._old.items():
            signal.signal(s, h)

    def why(self) -> str | None:
        """Why the run stopped, said as its reason: the first signal's name (None: no signal came)."""
        import signal

        return f"stopped by signal {signal.Signals(self.got[0]).name}" if self.got else None

    def exit_code(self) -> int:
        """130 after SIGINT (as a shell reports ^C), 0 after SIGTERM (a clean, asked-for stop)."""
        import signal

        return 130 if self.got and self.got[0] == signal.SIGINT else 0


def end_of_run(rep: dict, as_json: bool, text: Callable[[dict], str], sig: Signals) -> None:
    """A run's report (a refresh, a rebalance to the special vdev): its last JSON line, or its text
    (``text(rep)``); then the exit code: the signal's for an interrupted run, 1 for a failed one."""
    import typer

    if as_json:
        print(json.dumps({"event": "done"} | rep), flush=True)
    else:
        out_text(text(rep))
    if rep["outcome"] == Outcome.INTERRUPTED and sig.exit_code():
        raise typer.Exit(sig.exit_code())
    if rep["outcome"] == Outcome.FAILED:
        raise typer.Exit(1)
