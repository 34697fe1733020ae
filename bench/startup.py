"""What a user could feel of rebal's start-up: each command below against a bare interpreter
(`python3 -c pass`), on this machine's own CPU, as the difference of the medians in ms.

    python3 bench/startup.py [--runs 15] [--config FILE]

Runs `rebal --version`, `rebal plan --help` and `rebal status --json` (against the pools the
config watches, every imported pool without one). The zpool commands status runs (read from its
--debug log: on zfs-fuse it asks four, on OpenZFS 2.3+ one) are timed apart, one after the other,
and taken off, so the figure is rebal's own. Goal: no command starts more than 150 ms after the
bare interpreter.
The pairs alternate which goes first, so a machine that slows down mid-run shifts both sides.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time

GOAL_MS = 150.0
# runs each command line given, one after the other (the zpool calls of a status, timed together)
SERIAL = "import shlex, subprocess, sys\nfor c in sys.argv[1:]: subprocess.run(shlex.split(c), capture_output=True)"


def zpool_calls(argv: list[str]) -> list[list[str]]:
    """The external commands a rebal command runs, from its --debug log."""
    r = subprocess.run([*argv[:3], "--debug", *argv[3:]], capture_output=True, text=True)
    return [shlex.split(line.split("run: ", 1)[1]) for line in r.stderr.splitlines() if " run: " in line]


def once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def median_pair(argv: list[str], base: list[str], runs: int) -> tuple[float, float]:
    a, b = [], []
    once(argv), once(base)  # warm the page cache
    for i in range(runs):
        if i % 2:
            a.append(once(argv))
            b.append(once(base))
        else:
            b.append(once(base))
            a.append(once(argv))
    return statistics.median(a), statistics.median(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--config", help="config file for `rebal status` (default: none, every imported pool)")
    a = ap.parse_args()
    py = sys.executable
    base = [py, "-c", "pass"]
    cfg = ["--config", a.config] if a.config else []
    env_cfg = [] if a.config else ["--config", "/dev/null"]
    status = [py, "-m", "rebal", *(cfg or env_cfg), "status", "--json"]
    commands = {
        "rebal --version": ([py, "-m", "rebal", "--version"], None),
        "rebal plan --help": ([py, "-m", "rebal", "plan", "--help"], None),
        "rebal status --json": (status, zpool_calls(status)),
    }
    print(f"start-up against `python3 -c pass`, median of {a.runs} pairs, this machine's CPU")
    worst = 0.0
    for name, (argv, work) in commands.items():
        t, t0 = median_pair(argv, base, a.runs)
        extra = 0.0
        if work:
            w, w0 = median_pair([py, "-c", SERIAL, *(shlex.join(c) for c in work)], [py, "-c", SERIAL], a.runs)
            extra = max(0.0, w - w0)  # the zpool calls status makes, one after the other: not rebal's own
        own = (t - t0 - extra) * 1000
        worst = max(worst, own)
        print(f"  {name:<22} {t * 1000:7.1f} ms   bare {t0 * 1000:6.1f} ms"
              + (f"   its {len(work)} zpool call(s) {extra * 1000:6.1f} ms" if work else "") + f"   rebal's own {own:+7.1f} ms")
    verdict = "met" if worst <= GOAL_MS else "NOT met"
    print(f"goal: at most {GOAL_MS:.0f} ms after a bare interpreter: worst {worst:.1f} ms, {verdict}")
    return 0 if worst <= GOAL_MS else 1


if __name__ == "__main__":
    sys.exit(main())
