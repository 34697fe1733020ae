"""Peak memory of planning over a large tree: scan + plan over 10,000,000 files (and a tenth of it).

The tree (empty files, 1,000 per directory) is built on a tmpfs mounted for the run; the scan and
the plan run in a child process whose peak RSS is read from the kernel (ru_maxrss). The baseline is
a child that imports the same modules and plans nothing, measured in the same run.
Target (issue 14): peak RSS under 150 MB for 10,000,000 files, flat as the tree grows; the time of
the scan is printed beside it (and `rebal plan` says it). A tmpfs of 10M empty files takes about
10 GB of kernel memory.

Run as root:  python3 bench/plan_memory.py [--files 10000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import os, resource, sys, time
sys.path.insert(0, {root!r})
from rebal.rebalance.scan import Filters, scan
from rebal.rebalance.planner import VdevFill, make_plan
t0 = time.perf_counter()
if {do!r}:
    res = scan([os.fsencode({tree!r})], Filters())
    M = 2**20
    vd = [VdevFill("a", 1000 * M, 800 * M), VdevFill("b", 1000 * M, 800 * M), VdevFill("c", 1000 * M, 0)]
    plan = make_plan(vd, res.dirs, 10)
    print(res.files, len(res.dirs), end=" ")
else:
    print(0, 0, end=" ")
print(round(time.perf_counter() - t0, 2), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def child(tree: str, do: bool) -> tuple[int, int, float, int]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), tree=tree, do=do)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1]), float(out[2]), int(out[3])


def build(tree: Path, files: int, per_dir: int = 1000) -> None:
    for i in range(files):
        if i % per_dir == 0:
            d = tree / f"d{i // per_dir:05d}"
            d.mkdir()
        os.close(os.open(d / f"f{i:07d}", os.O_CREAT | os.O_WRONLY, 0o644))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000_000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (it mounts a tmpfs)")
    mnt = Path(tempfile.mkdtemp(prefix="rebal-planmem-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16g,nr_inodes=0", "rebal-planmem", str(mnt)], check=True)
    try:
        base = child(str(mnt), False)
        print(f"baseline (imports only): peak RSS {base[3] / 1024:.1f} MB")
        for n in sorted({a.files // 10, a.files}):
            tree = mnt / f"t{n}"
            tree.mkdir()
            t0 = time.perf_counter()
            build(tree, n)
            built = time.perf_counter() - t0
            files, dirs, secs, rss = child(str(tree), True)
            print(f"{files:>9} files in {dirs:>5} dirs (built in {built:.0f} s): scan+plan {secs:.1f} s, "
                  f"peak RSS {rss / 1024:.1f} MB = baseline + {(rss - base[3]) / 1024:.1f} MB "
                  f"({rss / base[3]:.2f}x baseline)")
        print(f"target: peak RSS < 150 MB at {a.files} files: {'met' if rss / 1024 < 150 else 'NOT met'}")
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
        os.rmdir(mnt)


if __name__ == "__main__":
    main()
