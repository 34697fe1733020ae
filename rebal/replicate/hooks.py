"""A job's pre_command and post_command: the admin's own programs, run around a replication.

Each is an argument list run without a shell, with a timeout, in a plain environment (PATH, and
REBAL_* naming the job, its source and target, the phase, and after the run its snapshot, outcome,
bytes and error). A pre hook that fails (exit status not 0, not found, timed out) fails the run
before any snapshot is taken; a post hook always runs, and its failure makes the run a warning.
"""

from __future__ import annotations

import threading

from ..errors import CommandFailed, RebalError
from ..process.command import run


def run_hook(argv: list[str], phase: str, environ: dict[str, str], timeout: int,
             stop: threading.Event | None = None) -> str | None:
    """Run one hook; None when it succeeded, else what went wrong (one line, its last output)."""
    env = {k: str(v) for k, v in environ.items()} | {"REBAL_PHASE": phase}
    try:
        res = run(argv, readonly=False, timeout=timeout, check=False, environ=env, inherit_env=False, stop=stop)
    except CommandFailed as e:  # timed out
        return f"{phase}_command {argv[0]}: {e.stderr.strip() or f'no answer in {timeout} s'}"
    except RebalError as e:  # not found, not executable
        return f"{phase}_command {argv[0]}: {e}"
    if res.returncode != 0:
        said = (res.stderr.strip() or res.stdout.strip()).splitlines()
        how = f"exit {res.returncode}" if res.returncode > 0 else f"killed by signal {-res.returncode}"
        return f"{phase}_command {argv[0]} failed ({how})" + (f": {said[-1][:300]}" if said else "")
    return None
