"""Steering the allocator on real OpenZFS: one grown pool rebalanced three ways, each on a fresh
copy of it, ``--runs`` times. Runs in the lane's guest (`tests/openzfs/vm/lane.py --bench-only
--benches steer`), as root.

The pool: two vdevs of 1 GiB filled to about 60% with incompressible data (48 directories of six
4 MiB files), then a third vdev added. The ways, to a spread of 2 points:
  steered:   rebal rebalance DIR --target-spread 2            (zfs_mg_noalloc_threshold for the run)
  unsteered: rebal rebalance DIR --target-spread 2 --no-steer (as every rebalancer does)
  loop:      what zfs-inplace-rebalancing does, per file: cp --reflink=never, compare the sha256 of
             both, mv over; every file once (it has no goal to stop at)
For each: bytes rewritten, bytes that left the old vdevs (their ALLOC before less after), rewritten
per byte moved, wall time to a `zpool sync` after it, the spread after, and the next incremental
stream's size (a bookmark before, a snapshot after, the stream counted). Ratios against steered.
Goal: steered at least 1.7x faster than unsteered."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BASE = Path("/var/tmp/rebal-steerbench")
POOL = "steerbench"
LOOP = ('while IFS= read -r f; do cp --reflink=never -ax "$f" "$f.tmp" && '
        '[ "$(sha256sum < "$f")" = "$(sha256sum < "$f.tmp")" ] && mv "$f.tmp" "$f"; done')


def sh(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


VDEV = 1 << 30  # each vdev's size (--vdev-gib)


def vdevs() -> dict[str, int]:
    """Data vdev -> ALLOC, from `zpool list -v -Hp`."""
    out = {}
    for line in sh("zpool", "list", "-v", "-Hp", POOL).stdout.splitlines():
        cells = line.split("\t")
        if line.startswith("\t") and cells[1].startswith(str(BASE)):
            out[cells[1]] = int(cells[3])
    return out


def fresh(dirs: int, files: int, mib: int) -> Path:
    if subprocess.run(["zpool", "list", POOL], capture_output=True).returncode == 0:
        sh("zpool", "destroy", "-f", POOL)
    shutil.rmtree(BASE, ignore_errors=True)
    BASE.mkdir(parents=True)
    disks = [BASE / f"d{i}" for i in range(3)]
    for d in disks:
        sh("truncate", "-s", str(VDEV), str(d))
    sh("zpool", "create", "-f", "-m", str(BASE / "mnt"), POOL, str(disks[0]), str(disks[1]))
    sh("zfs", "create", "-o", "compression=off", f"{POOL}/data")
    root = BASE / "mnt" / "data"
    block = bytearray(os.urandom(1 << 20))
    for d in range(dirs):
        (root / f"d{d:02d}").mkdir()
        for f in range(files):
            with open(root / f"d{d:02d}" / f"f{f}", "wb") as out:
                for i in range(mib):
                    block[0:8] = (d * 100000 + f * 100 + i).to_bytes(8, "little")
                    out.write(block)
    sh("zpool", "sync", POOL)
    sh("zpool", "add", "-f", POOL, str(disks[2]))
    sh("zpool", "sync", POOL)
    # the next incremental's base, as rebal's replication keeps it: a bookmark (a snapshot would pin the
    # old copies on the old vdevs, and rebal would refuse to rewrite what it holds)
    sh("zfs", "snapshot", f"{POOL}/data@before")
    sh("zfs", "bookmark", f"{POOL}/data@before", f"{POOL}/data#before")
    sh("zfs", "destroy", f"{POOL}/data@before")
    return root


def stream_size() -> int:
    sh("zfs", "snapshot", f"{POOL}/data@after")
    p = subprocess.Popen(["zfs", "send", "-i", f"{POOL}/data#before", f"{POOL}/data@after"], stdout=subprocess.PIPE)
    n = 0
    while chunk := p.stdout.read(1 << 20):
        n += len(chunk)
    if p.wait() != 0:
        sys.exit("zfs send of the incremental failed")
    return n


def one(way: str, root: Path, cfg: Path) -> dict:
    start = vdevs()
    old = [n for n, a in start.items() if a > VDEV // 10]  # the full ones (the new one holds some metadata)
    t0 = time.perf_counter()
    if way == "loop":
        files = sorted(str(p) for p in root.rglob("f*"))
        r = subprocess.run(["bash", "-c", LOOP], input="".join(f + "\n" for f in files), text=True, capture_output=True)
        rewritten = sum(os.path.getsize(f) for f in files)
    else:
        argv = ["rebal", "--config", str(cfg), "rebalance", str(root), "--target-spread", "2", "--json"]
        r, phase = timed(argv + (["--no-steer"] if way == "unsteered" else []), t0)
        done = json.loads(r.stdout.splitlines()[-1]) if r.stdout.strip() else {}
        rewritten = done.get("bytes", 0)
    sh("zpool", "sync", POOL)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{way} failed: {r.stderr[-800:]}")
    if way == "loop":
        phase = {"prepare": 0.0, "rewrite": took, "finish": 0.0}
    now = vdevs()
    moved = sum(start[n] - now[n] for n in old)
    caps = [100.0 * a / VDEV for a in now.values()]
    return {"way": way, "rewritten": rewritten, "moved": moved, "per_moved": rewritten / max(moved, 1),
            "seconds": took, "spread": max(caps) - min(caps), "incremental": stream_size(), **phase}


def timed(argv: list[str], t0: float) -> tuple[subprocess.CompletedProcess, dict]:
    """Run rebal, each JSON event timed as it comes: the phases (before the "start" event: scan, plan,
    placement measured by zdb; from it to the last directory: the rewriting; after: the settled
    measurement and the placement measured again), as a pool's size does not scale them alike."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, start, last = [], None, None
    for line in p.stdout:
        lines.append(line)
        ev = json.loads(line).get("event")
        now = time.perf_counter() - t0
        if ev == "start":
            start = now
        elif ev in ("dir", "progress"):
            last = now
    err = p.stderr.read()
    p.wait()
    end = time.perf_counter() - t0
    start = end if start is None else start
    last = start if last is None else last
    return (subprocess.CompletedProcess(argv, p.returncode, "".join(lines), err),
            {"prepare": start, "rewrite": last - start, "finish": end - last})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ways", default="steered,unsteered,loop")
    ap.add_argument("--dirs", type=int, default=48, help="directories of six 4 MiB files (48: about 60%% of two 1 GiB vdevs)")
    ap.add_argument("--vdev-gib", type=int, default=1, help="each vdev's size; give --dirs in proportion")
    a = ap.parse_args()
    global VDEV
    VDEV = a.vdev_gib << 30
    if not Path("/sys/module/zfs/parameters/zfs_mg_noalloc_threshold").exists():
        sys.exit("needs OpenZFS's kernel module (zfs_mg_noalloc_threshold)")
    cfg = BASE.with_suffix(".toml")
    cfg.write_text(f'state_db = "{BASE}.db"\n[rebalance]\nreserve_percent = 1.0\n')
    got: dict[str, list[dict]] = {}
    for run in range(a.runs):
        for way in a.ways.split(","):  # the ways take turns: a slower guest minute hits all of them
            m = one(way, fresh(a.dirs, 6, 4), cfg)
            got.setdefault(way, []).append(m)
            print(f"run {run + 1} {way:9} rewrote {m['rewritten'] >> 20:5d} MiB, moved {m['moved'] >> 20:4d} MiB "
                  f"({m['per_moved']:.2f}x), {m['seconds']:6.1f} s, spread {m['spread']:4.1f}, "
                  f"next incremental {m['incremental'] >> 20} MiB; phases {m['prepare']:.1f} + {m['rewrite']:.1f} + "
                  f"{m['finish']:.1f} s", flush=True)
    sh("zpool", "destroy", "-f", POOL)
    shutil.rmtree(BASE, ignore_errors=True)
    base = statistics.median(m["seconds"] for m in got["steered"]) if "steered" in got else None
    print("medians (ratios: time against steered)")
    for way, ms in got.items():
        secs = statistics.median(m["seconds"] for m in ms)
        print(f"  {way:9} {statistics.median(m['rewritten'] for m in ms) / 2**20:7.0f} MiB rewritten, "
              f"{statistics.median(m['per_moved'] for m in ms):.2f}x per byte moved, {secs:6.1f} s"
              + (f" ({secs / base:.2f}x)" if base else "") + f", spread {statistics.median(m['spread'] for m in ms):.1f}")
    if base and "unsteered" in got:
        ratio = statistics.median(m["seconds"] for m in got["unsteered"]) / base
        phase = (statistics.median(m["rewrite"] for m in got["unsteered"])
                 / statistics.median(m["rewrite"] for m in got["steered"]))
        print(f"goal: steered >= 1.7x faster than unsteered: {ratio:.2f}x the whole command, {phase:.2f}x the "
              f"rewriting; {'met' if ratio >= 1.7 else 'NOT met'} (the command's fixed phases weigh more on a small pool)")


if __name__ == "__main__":
    main()
