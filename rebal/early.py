"""Read-only commands started before the code that asks for them is loaded.

A rebalance asks the pool four things before it can scan (issue 19): each is a zfs/zpool process of
about 0.1 s of CPU in the lane's 2-vCPU guest, and loading rebal's modules is 0.7 s of CPU in one
thread. `rebal rebalance`'s fast path knows the pool and datasets from the command line and the
mount table alone, so it starts those processes first (`start`) and the other vCPU answers them
while the modules load. `runner.run` then takes the answer of a command line started here
(`take`), once, instead of starting it again; what nobody took is ended (`drop`).

Only read-only command lines are started here, and only their answer is shared: the caller that
takes one reads it, checks it and reports its failure exactly as if it had started it itself.
Importable alone (os, and subprocess when used): nothing of rebal is loaded before the processes run.
"""

from __future__ import annotations

import os

_started: dict[tuple[str, ...], object] = {}


def env() -> dict[str, str]:
    """The environment of every command rebal runs: parsers read English, C-locale number formats."""
    out = dict(os.environ)
    out["LC_ALL"] = "C"
    out.pop("LANGUAGE", None)
    return out


def start(argvs: list[list[str]]) -> None:
    """Start each read-only command line now; one that cannot start is left to its caller, who
    starts it again and reports why it could not."""
    import subprocess

    for argv in argvs:
        key = tuple(argv)
        if key in _started:
            continue
        try:
            _started[key] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             stdin=subprocess.DEVNULL, text=True, errors="surrogateescape",
                                             env=env())
        except OSError:
            continue


def take(argv: tuple[str, ...]):
    """The process started for exactly this command line (a subprocess.Popen), once; else None."""
    return _started.pop(argv, None) if _started else None


def drop() -> None:
    """End and reap what nobody took (a run that failed before its queries, a query it did not need)."""
    while _started:
        _, proc = _started.popitem()
        try:
            proc.kill()  # type: ignore[attr-defined]
        except OSError:
            pass
        proc.communicate()  # type: ignore[attr-defined]


def started() -> list[tuple[str, ...]]:
    """The command lines started and not yet taken (for tests and debugging)."""
    return list(_started)
