"""How long `rebal status` takes of its own, beyond the zpool calls it makes.

Runs, in one process and against one pool: the zpool commands that status makes (the baseline), and
`rebal status --json` / `rebal status` (table) through the installed entry point. Prints the means
and the overhead. Goal (issue 14): at most 0.15 s of rebal's own per call on a warm machine (issue 2's was 0.3 s).

    python3 bench/status.py POOL [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time


def timed(argv: list[str], runs: int) -> float:
    subprocess.run(argv, capture_output=True)  # warm the page cache
    t0 = time.perf_counter()
    for _ in range(runs):
        subprocess.run(argv, capture_output=True)
    return (time.perf_counter() - t0) / runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pool")
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from rebal.zfs.host import ZfsHost

    z = ZfsHost.here()
    z.pools([a.pool])
    flavour = z.flavour
    calls = {
        "json": [["zpool", "list", "-v", "-j", "--json-int", a.pool]],
        "parsable": [["zpool", "list", "-v", "-j", "--json-int", a.pool], ["zpool", "list", "-v", "-Hp", a.pool]],
        "iostat": [["zpool", "list", "-v", "-j", "--json-int", a.pool], ["zpool", "list", "-v", "-Hp", a.pool],
                   ["zpool", "iostat", "-v", a.pool], ["zpool", "status", a.pool]],
    }[flavour]
    base = sum(timed(c, a.runs) for c in calls)
    exe = shutil.which("rebal") or sys.exit("rebal is not installed (pip install -e .)")
    # the pyenv shim is a bash script; time the real entry point next to the interpreter
    real = os.path.join(os.path.dirname(sys.executable), "rebal")
    exe = real if os.path.exists(real) else exe
    empty = timed([sys.executable, "-c", "pass"], a.runs)
    js = timed([exe, "status", "--json", a.pool], a.runs)
    table = timed([exe, "status", a.pool], a.runs)
    print(f"zpool output read as: {flavour} ({len(calls)} zpool calls per status)")
    print(f"baseline  zpool calls alone        {base * 1000:7.1f} ms")
    print(f"          python3 -c pass          {empty * 1000:7.1f} ms")
    print(f"rebal     status --json            {js * 1000:7.1f} ms   own: {(js - base) * 1000:6.1f} ms   ratio {js / base:5.1f}x")
    print(f"rebal     status (table)           {table * 1000:7.1f} ms   own: {(table - base) * 1000:6.1f} ms   ratio {table / base:5.1f}x")
    print(f"goal      own time <= 150 ms (issue 14): {'met' if max(js, table) - base <= 0.15 else 'NOT met'}")


if __name__ == "__main__":
    main()
