"""Replication against the plain tools, in one run, on this machine (issue 14, goal 3):

  whole runs, zfs mode, each against its raw equivalent on the same data (zfs snapshot, then
  zfs send [-i PREV] | ssh zfs receive, into a dataset of its own):
    a full send                 goal <= 1.1x the raw
    a run with nothing new      goal <= 1.5x the raw (snapshot + empty incremental)
    a +20% incremental          goal <= 1.3x the raw
  and the remote (ssh) and local commands each run took;
  rsync mode: rebal replicate (rsync) vs plain rsync with the same flags (throughput).

Source and target are zfs-fuse pools on sparse files, the backup host an sshd on 127.0.0.1 with a
key made for the run; all are removed at the end.

Run as root:  python3 bench/replicate.py [--mib 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from sshenv import start_sshd  # noqa: E402
from zfsenv import create_pool, sh  # noqa: E402


def rebal(cfg: Path, *args: str) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "rebal", "--config", str(cfg), *args, "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"rebal {' '.join(args)} failed: {r.stdout[-500:]} {r.stderr[-500:]}")
    return json.loads(r.stdout), wall


def ssh_argv(host) -> list[str]:
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={host.known_hosts}",
            "-i", str(host.identity), "-p", str(host.port), "-l", "root", "--", host.host]


def raw_run(host, src: str, dst: str, snap: str, prev: str | None) -> float:
    """zfs snapshot, then zfs send [-i prev] | ssh zfs receive: the bare tools' whole run."""
    t0 = time.perf_counter()
    sh("zfs", "snapshot", f"{src}@{snap}")
    send = subprocess.Popen(["zfs", "send", *(["-i", f"@{prev}"] if prev else []), f"{src}@{snap}"],
                            stdout=subprocess.PIPE)
    recv = subprocess.run(ssh_argv(host) + [f"zfs receive {dst}"], stdin=send.stdout, capture_output=True)
    send.stdout.close()
    send.wait()
    took = time.perf_counter() - t0
    assert recv.returncode == 0 and send.returncode == 0, recv.stderr
    return took


def add_data(root: Path, mib: int, tag: str) -> None:
    for i in range(8):
        with open(root / f"{tag}{i}.bin", "wb") as f:
            for _ in range(max(1, mib // 8)):
                f.write(os.urandom(2**20))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3, help="nothing-new runs to time (the median counts)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    tmp = Path(tempfile.mkdtemp(prefix="rebal-bench-repl-"))
    host = start_sshd(tmp / "sshd")
    size = f"{max(1024, a.mib * 6)}M"
    src = create_pool(tmp, [[]], size, prefix="rbbr")
    dst = create_pool(tmp, [[]], size, prefix="rbbr")
    try:
        sh("zfs", "create", f"{src.name}/data")
        root = Path(sh("zfs", "get", "-H", "-o", "value", "mountpoint", f"{src.name}/data").stdout.strip())
        add_data(root, a.mib, "f")
        (dst.mountpoint / "rsync-rebal").mkdir(parents=True, exist_ok=True)
        cfg = tmp / "config.toml"
        common = (f'target_host = "{host.host}"\ntarget_port = {host.port}\nidentity_file = "{host.identity}"\n'
                  f'known_hosts = "{host.known_hosts}"\nsource = "{src.name}/data"\n')
        cfg.write_text(f'state_db = "{tmp / "state.db"}"\n[[replicate]]\nname = "z"\ntarget = "{dst.name}/z"\n{common}'
                       f'[[replicate]]\nname = "r"\nmode = "rsync"\ntarget = "{dst.mountpoint}/rsync-rebal"\n{common}')
        rows = []

        def both(label: str, prev_raw: str | None, snap: str):
            z, z_wall = rebal(cfg, "replicate", "z")
            raw = raw_run(host, f"{src.name}/data", f"{dst.name}/raw", snap, prev_raw)
            rows.append((label, z_wall, raw, z.get("remote_commands"), z.get("local_commands"), z["bytes"]))
            return z

        both("full send", None, "raw0")
        for i in range(a.rounds):
            both("nothing new", f"raw{i}", f"raw{i + 1}")
        add_data(root, a.mib // 5, "g")
        both("+20% incremental", f"raw{a.rounds}", f"raw{a.rounds + 1}")

        # rsync mode: rebal, then plain rsync with the same flags from the same snapshot's data
        r, r_wall = rebal(cfg, "replicate", "r")
        view = tmp / "view"
        view.mkdir()
        sh("zfs", "clone", "-o", f"mountpoint={view}", "-o", "readonly=on", f"{src.name}/data@{r['snapshot']}",
           f"{src.name}/benchview")
        flags = ["-aHAX", "--numeric-ids", "--delete-delay", "--stats", "--protect-args", "--mkpath",
                 "--partial-dir=.rebal-partial"]
        t0 = time.perf_counter()
        subprocess.run(["rsync", *flags, "-e", " ".join(ssh_argv(host)[:-2]), f"{view}/",
                        f"root@{host.host}:{dst.mountpoint}/rsync-plain/"], check=True, capture_output=True)
        plain = time.perf_counter() - t0
        for _ in range(50):
            if subprocess.run(["zfs", "destroy", f"{src.name}/benchview"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)

        print(f"{a.mib} MiB of random data in 8 files (+20% later); zfs-fuse pools; sshd on 127.0.0.1\n")
        print(f"{'zfs mode, whole runs':22} {'rebal s':>8} {'raw s':>7} {'ratio':>6} {'goal':>6}  {'remote':>6} {'local':>6}  bytes")
        goals = {"full send": 1.1, "nothing new": 1.5, "+20% incremental": 1.3}
        noop = sorted(x[1] / x[2] for x in rows if x[0] == "nothing new")
        for label, zw, raw, rc, lc, nbytes in rows:
            g = goals[label]
            print(f"{label:22} {zw:8.2f} {raw:7.2f} {zw / raw:6.2f} {g:6.1f}  {rc!s:>6} {lc!s:>6}  {nbytes}"
                  f"  {'met' if zw / raw <= g else 'NOT met'}")
        print(f"nothing new, median of {len(noop)}: {noop[len(noop) // 2]:.2f}x (goal <= 1.5x)")
        rr = plain / r["rsync_seconds"]
        print(f"rsync mode: {rr:.2f}x plain rsync's throughput (whole run {r_wall:.2f} s, plain {plain:.2f} s)")
        print("bench-json " + json.dumps([{"case": x[0], "rebal_s": round(x[1], 3), "raw_s": round(x[2], 3),
                                           "ratio": round(x[1] / x[2], 2), "remote": x[3], "local": x[4]} for x in rows]))
    finally:
        host.stop()
        src.destroy()
        dst.destroy()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
