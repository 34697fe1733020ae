"""Helpers for tests on real ZFS (zfs-fuse here): availability, and throw-away pools on sparse files."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_counter = itertools.count()


def zfs_problem() -> str | None:
    """Why real-ZFS tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("zpool"):
        return "zpool is not installed (bash scripts/setup.sh installs zfs-fuse)"
    r = subprocess.run(["zpool", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"zpool does not answer: {r.stderr.strip() or r.stdout.strip()} (start zfs-fuse)"
    return None


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


@dataclass
class TestPool:
    name: str
    dir: Path
    mountpoint: Path
    disks: list[Path]

    def disk(self, size: str = "256M") -> Path:
        """A new sparse file to use as a vdev."""
        p = self.dir / f"d{len(self.disks)}"
        sh("truncate", "-s", size, str(p))
        self.disks.append(p)
        return p

    def add(self, *spec: str) -> None:
        sh("zpool", "add", "-f", self.name, *spec)

    def cycle(self) -> None:
        """Export and import the pool: nothing of it is left in the ARC (a cold reading next)."""
        sh_busy_retry("zpool", "export", self.name)
        sh("zpool", "import", "-d", str(self.dir), self.name)

    def destroy(self) -> None:
        """Destroy the pool. zfs-fuse answers "pool is busy" for a moment after files were open."""
        for attempt in range(50):
            if sh("zpool", "list", self.name, check=False).returncode != 0:
                return
            r = sh("zpool", "destroy", "-f", self.name, check=False)
            if r.returncode == 0:
                return
            if "busy" not in r.stderr:
                raise AssertionError(f"zpool destroy {self.name}: {r.stderr.strip()}")
            time.sleep(0.1 * min(attempt + 1, 5))  # bounded retry of a cleanup, not a synchronisation
        raise AssertionError(f"zpool destroy {self.name}: still busy")


def create_pool(tmp: Path, layout: list[list[str]], size: str = "256M", prefix: str = "rbt",
                ashift: int | None = None) -> TestPool:
    """Create a pool; ``layout`` is a list of vdevs, each [] (one disk) or ["mirror", n] / ["raidz1", n];
    ``ashift``: the vdevs' sector size (file vdevs get 9 by default; disks today are 12)."""
    name = f"{prefix}{os.getpid()}x{next(_counter)}"
    d = tmp / name
    d.mkdir(parents=True)
    pool = TestPool(name, d, d / "mnt", [])
    spec: list[str] = []
    for vdev in layout:
        spec += vdev_spec(pool, vdev, size)
    sh("zpool", "create", "-f", *(["-o", f"ashift={ashift}"] if ashift else []), "-m", str(pool.mountpoint), name, *spec)
    return pool


def vdev_spec(pool: TestPool, vdev: list, size: str = "256M") -> list[str]:
    if not vdev:
        return [str(pool.disk(size))]
    kind, n = vdev
    return [kind] + [str(pool.disk(size)) for _ in range(int(n))]


def sh_busy_retry(*argv: str) -> subprocess.CompletedProcess:
    """A zfs command that zfs-fuse may answer with "busy" for a moment after files were open
    (bounded retry of a known quirk, not a synchronisation)."""
    for attempt in range(50):
        r = sh(*argv, check=False)
        if r.returncode == 0 or "busy" not in r.stderr:
            break
        time.sleep(0.1 * min(attempt + 1, 5))
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def write_cfg(tmp_path, **rebalance):
    """A config with the state database in ``tmp_path`` and these [rebalance] keys."""
    import json

    p = tmp_path / "config.toml"
    lines = [f'state_db = "{tmp_path / "state.db"}"', "[rebalance]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in rebalance.items()]
    p.write_text("\n".join(lines) + "\n")
    return p


def logging_shim(work: Path, tool: str) -> tuple[Path, Path]:
    """A directory to put first on PATH whose ``tool`` (zfs, zdb) writes its arguments to a log, a
    line a call, then runs the real one; (the directory, the log)."""
    real = shutil.which(tool)
    shim, calls = work / f"{tool}-shim", work / f"{tool}-calls"
    shim.mkdir()
    (shim / tool).write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    (shim / tool).chmod(0o755)
    return shim, calls
