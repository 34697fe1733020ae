"""Replication throughput against the plain tools, in one run, on this machine:

  zfs mode:   rebal replicate (zfs)      vs  zfs send SNAP | ssh ... zfs receive     target >= 0.95x
  rsync mode: rebal replicate (rsync)    vs  rsync -aHAX ... (same flags, same ssh)  target >= 0.95x
  and the wall time of a zfs-mode run with nothing new to send.

Source and target are zfs-fuse pools on sparse files, the backup host an sshd on 127.0.0.1 with a
key made for the run; all are removed at the end. Throughput is bytes / seconds of the transfer
itself (rebal records how long its stream and its rsync ran); the wall time of whole runs, with
snapshots, holds, checks and pruning, is printed beside it.

Run as root:  python3 bench/replicate.py [--mib 512]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=512)
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
        for i in range(8):
            with open(root / f"f{i}.bin", "wb") as f:
                for _ in range(a.mib // 8):
                    f.write(os.urandom(2**20))
        (dst.mountpoint / "rsync-rebal").mkdir(parents=True, exist_ok=True)
        cfg = tmp / "config.toml"
        common = (f'target_host = "{host.host}"\ntarget_port = {host.port}\nidentity_file = "{host.identity}"\n'
                  f'known_hosts = "{host.known_hosts}"\nsource = "{src.name}/data"\n')
        cfg.write_text(f'state_db = "{tmp / "state.db"}"\n[[replicate]]\nname = "z"\ntarget = "{dst.name}/z"\n{common}'
                       f'[[replicate]]\nname = "r"\nmode = "rsync"\ntarget = "{dst.mountpoint}/rsync-rebal"\n{common}')
        data = a.mib * 2**20

        # zfs mode: rebal, then the raw pipe of the same data into another dataset
        z, z_wall = rebal(cfg, "replicate", "z")
        z_stream = z["datasets"][0]["seconds"]
        snap = f"{src.name}/data@{z['snapshot']}"
        t0 = time.perf_counter()
        send = subprocess.Popen(["zfs", "send", snap], stdout=subprocess.PIPE)
        recv = subprocess.run(ssh_argv(host) + [f"zfs receive {dst.name}/raw"], stdin=send.stdout)
        send.stdout.close()
        send.wait()
        raw = time.perf_counter() - t0
        assert recv.returncode == 0 and send.returncode == 0
        noop, noop_wall = rebal(cfg, "replicate", "z")

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

        mb = data / 1e6
        print(f"{a.mib} MiB of random data in 8 files; zfs-fuse pools; sshd on 127.0.0.1\n")
        print(f"{'':40} {'seconds':>8} {'MB/s':>8}")
        print(f"{'zfs   rebal replicate (stream)':40} {z_stream:8.2f} {z['bytes'] / 1e6 / z_stream:8.1f}   (whole run {z_wall:.2f} s)")
        print(f"{'zfs   zfs send | ssh zfs receive':40} {raw:8.2f} {z['bytes'] / 1e6 / raw:8.1f}")
        print(f"{'rsync rebal replicate (rsync)':40} {r['rsync_seconds']:8.2f} {mb / r['rsync_seconds']:8.1f}   (whole run {r_wall:.2f} s)")
        print(f"{'rsync plain rsync, same flags':40} {plain:8.2f} {mb / plain:8.1f}")
        print(f"{'zfs   run with nothing new to send':40} {noop_wall:8.2f}          (sent {noop['bytes']} bytes)")
        rz = raw / z_stream
        rr = plain / r["rsync_seconds"]
        print(f"\nzfs mode: {rz:.2f}x the raw pipe's throughput (target >= 0.95x: {'met' if rz >= 0.95 else 'NOT met'})")
        print(f"rsync mode: {rr:.2f}x plain rsync's throughput (target >= 0.95x: {'met' if rr >= 0.95 else 'NOT met'})")
        print(f"whole runs: zfs {raw / z_wall:.2f}x, rsync {plain / r_wall:.2f}x (snapshots, checks, holds, pruning included)")
    finally:
        host.stop()
        src.destroy()
        dst.destroy()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
