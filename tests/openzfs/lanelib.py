"""Helpers of the tests that run inside the OpenZFS lane's guest."""

from __future__ import annotations

import os
import subprocess

from zfsenv import sh


def zpool_list_hp(pool: str) -> dict[str, dict]:
    """Rows of `zpool list -v -Hp POOL`, read here independently of rebal: name -> {size, alloc, free,
    section}; the section is "" for data vdevs, else the class header the row follows."""
    out: dict[str, dict] = {}
    section = ""
    for line in sh("zpool", "list", "-v", "-Hp", pool).stdout.splitlines():
        cells = line.split("\t")
        if not line.startswith("\t"):
            head = line.split()[0]
            if head != pool:  # a class header (padded with spaces): logs, cache, spare, special, dedup
                section = head
            continue
        name, size, alloc, free = cells[1:5]
        out[name] = {"size": None if size == "-" else int(size), "alloc": None if alloc == "-" else int(alloc),
                     "free": None if free == "-" else int(free), "section": section}
    return out


def write_random(path, mib: int, seed: int = 0) -> None:
    """``mib`` MiB of incompressible data, fast: a random MiB varied per MiB (no two records alike)."""
    block = bytearray(os.urandom(1 << 20))
    with open(path, "wb") as f:
        for i in range(mib):
            block[0:8] = (i + (seed << 32)).to_bytes(8, "little")
            block[4096:4104] = block[0:8]
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def zpool_sync(pool: str) -> None:
    sh("zpool", "sync", pool)


def prop(ds: str, name: str) -> str:
    return sh("zfs", "get", "-Hp", "-o", "value", name, ds).stdout.strip()


def pool_prop(pool: str, name: str) -> str:
    return sh("zpool", "get", "-Hp", "-o", "value", name, pool).stdout.strip()


def inodes(root) -> dict[str, int]:
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = os.lstat(p).st_ino
    return out


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def restore_etc(etc, saved: bytes | None, state_db: str, *more: str) -> None:
    """Put /etc/rebal back as a test found it: its config (or none), no copied key or host key, and
    the test's state database (with its WAL files) and ``more`` files gone."""
    from pathlib import Path

    if saved is None:
        (etc / "config.toml").unlink(missing_ok=True)
    else:
        (etc / "config.toml").write_bytes(saved)
    for f in ("lane-id", "lane-known_hosts"):
        (etc / f).unlink(missing_ok=True)
    for f in (state_db, state_db + "-wal", state_db + "-shm", *more):
        Path(f).unlink(missing_ok=True)
