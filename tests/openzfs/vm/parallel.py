"""The guest's tests in two streams at once, then those that must run alone.

Measured on the CI machine's kind (2 cores, the guest TCG with 2 vCPUs): one pytest process keeps
about one vCPU busy, so the guest tests took 1,750 s with half the machine idle. The test files are
split into two groups of about equal time (by the durations the last lane run on this machine
recorded, else by their test count), each run by its own pytest in the guest, concurrently; then the
tests marked ``lane_alone`` (they hold something the whole guest shares: the installed package and
systemd, the lane's disks, a kernel tunable) run by themselves. A file's tests stay in one process
(module fixtures, the order they were written in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_TEST_SECONDS = 40.0  # a test with no recorded duration


def files_of(nodeids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in nodeids:
        out.setdefault(n.split("::", 1)[0], []).append(n)
    return out


def split(nodeids: list[str], durations: dict[str, float], streams: int = 2) -> list[list[str]]:
    """The test files in ``streams`` groups of about equal time, longest first into the group with
    the least so far (a file's tests stay together)."""
    cost = {f: sum(durations.get(n, DEFAULT_TEST_SECONDS) for n in ns) for f, ns in files_of(nodeids).items()}
    groups: list[list[str]] = [[] for _ in range(streams)]
    load = [0.0] * streams
    for f in sorted(cost, key=lambda f: (-cost[f], f)):
        i = load.index(min(load))
        groups[i].append(f)
        load[i] += cost[f]
    return [sorted(g) for g in groups]


def durations_from_progress(text: str) -> dict[str, float]:
    """nodeid -> seconds, from the guest's progress log ("end NODEID N s" lines, tests/conftest.py)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "end" and parts[3] == "s" and parts[2].isdigit():
            out[parts[1]] = float(parts[2])
    return out


def load_durations(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def save_durations(path: Path, seen: dict[str, float]) -> None:
    merged = load_durations(path) | seen
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(merged, indent=0, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache: the next run splits by test counts


def stamp(seconds: float) -> str:
    """A stream line's time since the streams began: "12:05" (minutes:seconds)."""
    m, sec = divmod(int(seconds), 60)
    return f"{m}:{sec:02d}"


def run_streams(argvs: list[list[str]], labels: list[str], limit: float,
                on_quiet: Callable[[str, float], None] | None = None,
                quiet_after: float = 300.0) -> tuple[list[int | None], list[str]]:
    """Run each argv at once, each line of their output passed on as it comes with its stream's label
    and the time since the start (CI's log then says when each test ended); (exit codes, outputs). A
    stream over ``limit`` seconds is killed: its code is None. A stream that prints nothing for
    ``quiet_after`` seconds is reported once per silence to ``on_quiet(label, seconds)`` (the lane
    then says where the guest stands: a hang is seen while it happens, not only at the limit)."""
    t0 = time.monotonic()
    procs = [subprocess.Popen(a, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for a in argvs]
    kept: list[list[str]] = [[] for _ in procs]
    last = [t0] * len(procs)
    reported = [False] * len(procs)
    expired = threading.Event()
    done = threading.Event()
    lock = threading.Lock()

    def expire() -> None:
        expired.set()
        for p in procs:
            if p.poll() is None:
                p.kill()

    def pump(i: int) -> None:
        assert procs[i].stdout is not None
        for raw in procs[i].stdout:
            line = raw.decode(errors="replace")
            kept[i].append(line)
            with lock:
                last[i] = time.monotonic()
                reported[i] = False
                sys.stdout.write(f"[{labels[i]} {stamp(last[i] - t0)}] {line}")
                sys.stdout.flush()

    def watch() -> None:
        while not done.wait(min(30.0, quiet_after)):
            for i, p in enumerate(procs):
                with lock:
                    quiet = time.monotonic() - last[i]
                    due = p.poll() is None and not reported[i] and quiet >= quiet_after
                    reported[i] = reported[i] or due
                if due and on_quiet is not None:
                    on_quiet(labels[i], quiet)

    timer = threading.Timer(limit, expire)
    timer.start()
    threads = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(len(procs))]
    watcher = threading.Thread(target=watch, daemon=True)
    try:
        for t in threads:
            t.start()
        watcher.start()
        codes = [p.wait() for p in procs]
        for t in threads:
            t.join()
    finally:
        done.set()
        timer.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return ([None if expired.is_set() else c for c in codes]), ["".join(k) for k in kept]
