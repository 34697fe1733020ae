"""Rewrite speed of `rebal rebalance` against the seed recipe and a raw copy, in one run, on one
file system (a zfs-fuse pool of 2 sparse-file vdevs made for the run and destroyed after).

  small files: 20,000 files of 4-64 KiB
      rebal (hash verify, the default)  vs  a shell loop per file:
      cp -a f f.tmp && cmp f f.tmp && rm f && mv f.tmp f          target: >= 5x its files/s
  large files: 4 files of 256 MiB
      rebal (hash verify)  vs  a raw copy: cat f > g              goal: >= 1.2x its MB/s (issue 14)
  small files, also against a raw copy of each (cat f > f.copy)   goal: >= 1.5x its files/s, and the
  loop goal is >= 8x (issue 14); and rebal with one durability barrier per batch
  (REBAL_DURABILITY=batch, OpenZFS's default) against its default here (an fsync inside each copy)

Run as root:  python3 bench/rebalance.py [--small 20000] [--large 4] [--large-mib 256]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from treegen import flat_tree  # noqa: E402


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def rebal_run(cfg: Path, target: str, jobs: int | None, env: dict | None = None, verify: str = "hash") -> dict:
    argv = [sys.executable, "-m", "rebal", "--config", str(cfg), "rebalance", target,
            "--all", "--verify", verify, "--method", "copy", "--json"]
    if jobs:
        argv += ["--jobs", str(jobs)]
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"rebal failed: {r.stderr}")
    done = json.loads(r.stdout.splitlines()[-1])
    done["wall"] = wall
    if done["outcome"] != "ok":
        sys.exit(f"rebal did not finish: {done}")
    return done


LOOP = 'while IFS= read -r f; do cp -a "$f" "$f.tmp" && cmp -s "$f" "$f.tmp" && rm "$f" && mv "$f.tmp" "$f"; done'
# the copies stay until the pool has committed them (as rebal's do); removed after the clock stops
RAW = 'while IFS= read -r f; do cat "$f" > "$f.raw" && sync "$f.raw"; done'
# the same, then the copy read back once: what a copy that is checked against its source reads
RAW_READBACK = 'while IFS= read -r f; do cat "$f" > "$f.raw" && sync "$f.raw" && cat "$f.raw" > /dev/null; done'
# issue 14's small-file baseline: a raw copy of each file (no fsync, no verify, no metadata), timed
# to the pool's commit like the others; the copies are removed after the clock stops
SMALL_RAW = 'while IFS= read -r f; do cat "$f" > "$f.copy"; done'


def shell_loop(script: str, files: list[Path], pool: str) -> float:
    """Time a shell loop over ``files`` up to the point where its data is committed to the pool,
    as rebal's time is (rebal waits for a transaction group before its last measurement)."""
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", script], input="".join(f"{f}\n" for f in files), text=True, check=True)
    commit(pool)
    return time.perf_counter() - t0


def commit(pool: str) -> None:
    """Wait for a transaction group (zfs-fuse has no `zpool sync`): a property change is a sync task."""
    sh("zfs", "set", "rebal:settle=1", pool)
    sh("zfs", "inherit", "rebal:settle", pool)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=20000)
    ap.add_argument("--baseline-sample", type=int, default=2000, help="files the shell loop rewrites (it is slow)")
    ap.add_argument("--large", type=int, default=4)
    ap.add_argument("--large-mib", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--dir", default="/var/tmp/rebal-bench")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (it makes a zfs-fuse pool)")
    base = Path(a.dir)
    pool = f"rbbench{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    # the raw loops keep every copy beside its original until the clock stops: twice the large data
    vdev = max(2048, int(1.5 * a.small * 34 / 1024 + 2.5 * a.large * a.large_mib) // 2 + 512)
    for d in ("d1", "d2"):
        sh("truncate", "-s", f"{vdev}M", str(base / d))
    sh("zpool", "create", "-f", "-m", str(base / "mnt"), pool, str(base / "d1"), str(base / "d2"))
    try:
        sh("zfs", "create", f"{pool}/small")
        sh("zfs", "create", f"{pool}/large")
        cfg = base / "config.toml"
        cfg.write_text(f'state_db = "{base / "state.db"}"\n[rebalance]\nreserve_percent = 1.0\n')
        small_root = base / "mnt" / "small"
        large_root = base / "mnt" / "large"
        t0 = time.perf_counter()
        small_bytes = flat_tree(small_root, a.small, (4096, 65536), seed=1)
        for i in range(a.large):
            with open(large_root / f"big{i}.bin", "wb") as f:
                for _ in range(a.large_mib):
                    f.write(os.urandom(2**20))
        print(f"trees built in {time.perf_counter() - t0:.0f} s: {a.small} small files ({small_bytes / 2**20:.0f} MiB), "
              f"{a.large} x {a.large_mib} MiB; pool {pool} of 2 x {vdev} MiB file vdevs (zfs-fuse)")
        commit(pool)

        # small files: rebal as it runs here (zfs-fuse: an fsync inside each copy), then with one
        # durability barrier per batch (OpenZFS's default, forced here)
        rs = rebal_run(cfg, f"{pool}/small", a.jobs)
        commit(pool)
        rf = rebal_run(cfg, f"{pool}/small", a.jobs, env=dict(os.environ, REBAL_DURABILITY="batch"))
        small_files = sorted(small_root.rglob("f*"))[: a.baseline_sample]
        bl = shell_loop(LOOP, small_files, pool)
        rawsmall = shell_loop(SMALL_RAW, small_files, pool)
        for f in small_files:
            os.unlink(f"{f}.copy")
        rebal_fps = rs["files"] / rs["wall"]
        batch_fps = rf["files"] / rf["wall"]
        base_fps = len(small_files) / bl
        raw_fps = len(small_files) / rawsmall
        # large files
        rl = rebal_run(cfg, f"{pool}/large", a.jobs)
        # the same with --verify size: what reading each copy back for its hash costs (issue 38)
        rz = rebal_run(cfg, f"{pool}/large", a.jobs, verify="size")
        r1j = rebal_run(cfg, f"{pool}/large", 1)  # one file at a time, as the raw copy goes
        rn = rebal_run(cfg, f"{pool}/large", a.jobs, verify="none")  # no check at all: the copy's own cost
        large_files = sorted(large_root.glob("big*.bin"))
        raw = shell_loop(RAW, large_files, pool)
        for f in large_files:
            os.unlink(f"{f}.raw")
        commit(pool)
        rawrb = shell_loop(RAW_READBACK, large_files, pool)
        for f in large_files:
            os.unlink(f"{f}.raw")
        mb = a.large * a.large_mib * 2**20 / 1e6
        rebal_mbs = rl["bytes"] / 1e6 / rl["wall"]
        raw_mbs = mb / raw
        print()
        print(f"{'':34} {'files':>7} {'seconds':>8} {'files/s':>9} {'MB/s':>8}")
        print(f"{'small  rebal (hash verify)':34} {rs['files']:7d} {rs['wall']:8.1f} {rebal_fps:9.0f} "
              f"{rs['bytes'] / 1e6 / rs['wall']:8.1f}")
        print(f"{'small  rebal, one barrier per batch':34} {rf['files']:7d} {rf['wall']:8.1f} {batch_fps:9.0f} "
              f"{rf['bytes'] / 1e6 / rf['wall']:8.1f}")
        print(f"{'small  baseline cp/cmp/rm/mv loop':34} {len(small_files):7d} {bl:8.1f} {base_fps:9.0f}")
        print(f"{'small  raw copy (cat f > f.copy)':34} {len(small_files):7d} {rawsmall:8.1f} {raw_fps:9.0f}")
        print(f"{'large  rebal (hash verify)':34} {rl['files']:7d} {rl['wall']:8.1f} {'':9} {rebal_mbs:8.1f}")
        print(f"{'large  rebal (size verify)':34} {rz['files']:7d} {rz['wall']:8.1f} {'':9} {rz['bytes'] / 1e6 / rz['wall']:8.1f}")
        print(f"{'large  rebal (hash verify, 1 job)':34} {r1j['files']:7d} {r1j['wall']:8.1f} {'':9} "
              f"{r1j['bytes'] / 1e6 / r1j['wall']:8.1f}")
        print(f"{'large  rebal (no verify)':34} {rn['files']:7d} {rn['wall']:8.1f} {'':9} {rn['bytes'] / 1e6 / rn['wall']:8.1f}")
        print(f"{'large  raw copy (cat f > g; sync)':34} {len(large_files):7d} {raw:8.1f} {'':9} {raw_mbs:8.1f}")
        print(f"{'large  raw copy, then g read back':34} {len(large_files):7d} {rawrb:8.1f} {'':9} {mb / rawrb:8.1f}")
        print()
        r1 = rebal_fps / base_fps
        r2 = rebal_mbs / raw_mbs
        r3 = rebal_fps / raw_fps
        print(f"small files: rebal / cp-cmp-rm-mv loop = {r1:.1f}x files/s (goal >= 8x: {'met' if r1 >= 8 else 'NOT met'})")
        print(f"small files: rebal / raw copy = {r3:.2f}x files/s (goal >= 1.5x: {'met' if r3 >= 1.5 else 'NOT met'})")
        print(f"small files: one barrier per batch / rebal's default here = {batch_fps / rebal_fps:.2f}x files/s")
        print(f"large files: rebal / raw copy = {r2:.2f}x MB/s (goal >= 1.2x: {'met' if r2 >= 1.2 else 'NOT met'}); "
              f"with --verify size {rz['bytes'] / 1e6 / rz['wall'] / raw_mbs:.2f}x, one job {r1j['bytes'] / 1e6 / r1j['wall'] / raw_mbs:.2f}x, "
              f"no verify {rn['bytes'] / 1e6 / rn['wall'] / raw_mbs:.2f}x; hash verify against a raw copy read back once: "
              f"{rebal_mbs / (mb / rawrb):.2f}x")
        print("bench-json " + json.dumps({"small_vs_loop": round(r1, 2), "small_vs_raw": round(r3, 2),
                                          "large_vs_raw": round(r2, 2), "small_fps": round(rebal_fps),
                                          "small_fps_batch_barrier": round(batch_fps),
                                          "large_mbs": round(rebal_mbs, 1),
                                          "large_size_verify_vs_raw": round(rz["bytes"] / 1e6 / rz["wall"] / raw_mbs, 2),
                                          "large_one_job_vs_raw": round(r1j["bytes"] / 1e6 / r1j["wall"] / raw_mbs, 2),
                                          "large_no_verify_vs_raw": round(rn["bytes"] / 1e6 / rn["wall"] / raw_mbs, 2),
                                          "large_vs_raw_readback": round(rebal_mbs / (mb / rawrb), 2)}))
        print(f"rebal jobs: {rs.get('jobs', 'default')}; wall time includes start-up, scan, journal and measurements")
    finally:
        for _ in range(50):
            if subprocess.run(["zpool", "destroy", "-f", pool], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
