"""`rebal where --read`: what reading a tree costs each vdev, measured. The point of spreading data is
that it reads faster from more disks; this reads a seeded sample of the tree's files while `zpool
iostat -v POOL 1` runs, and sums the per-second reports of the seconds the reading took: each data
vdev's share of the bytes and operations read from disk, and the throughput.

Honest about what it cannot see: a block already in the ARC is not read from a disk and shows in no
vdev's figures (the report gives the share of the bytes read that came from the disks; an export
and import of the pool, or a tree bigger than the ARC, makes the reading cold); the page cache is
dropped for each file before it is read (posix_fadvise), which is what matters on zfs-fuse; other
reads of the pool in those seconds count too; and on zfs-fuse the throughput is FUSE's, not the
disks' (the shares are real)."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import RebalError
from .process.command import end
from .where import collect
from .zfs.parse import ParseError, parse_human

if TYPE_CHECKING:
    from .zfs.host import ZfsHost

CHUNK = 1 << 20
HEADER = "capacity"


@dataclass
class Report:
    at: float  # monotonic time its first line arrived
    rows: list[tuple[int, str, str, int, int]] = field(default_factory=list)  # indent, section, name, read ops, read bytes


@dataclass
class ReadResult:
    pool: str
    paths: list[str]
    files_read: int = 0
    bytes_read: int = 0  # what rebal read (logical)
    seconds: float = 0.0
    vdevs: list[dict] = field(default_factory=list)  # name, bytes, ops, share_bytes, share_ops
    disk_bytes: int = 0  # read from the pool's data vdevs in those seconds
    notes: list[str] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.bytes_read / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        return {"pool": self.pool, "paths": self.paths, "files_read": self.files_read, "bytes_read": self.bytes_read,
                "seconds": round(self.seconds, 3), "throughput_bytes_per_second": int(self.throughput),
                "disk_bytes": self.disk_bytes,
                "from_disk": round(self.disk_bytes / self.bytes_read, 4) if self.bytes_read else 0.0,
                "vdevs": self.vdevs, "notes": self.notes}


def parse_reports(lines: list[tuple[float, str]]) -> list[Report]:
    """`zpool iostat -v POOL INTERVAL` lines (with their arrival times) -> one report per interval."""
    from .zfs.parse import SECTION_CLASS

    out: list[Report] = []
    section = "normal"
    for at, raw in lines:
        s = raw.strip()
        if s.startswith(HEADER):
            out.append(Report(at))
            section = "normal"
            continue
        if not out or not s or s.startswith("---") or s.startswith("pool "):
            continue
        parts = s.split()
        if parts[0] in SECTION_CLASS and all(p == "-" for p in parts[1:]):
            section = SECTION_CLASS[parts[0]]
            continue
        if len(parts) < 7:
            continue
        try:
            ops, nbytes = parse_human(parts[3]), parse_human(parts[5])
        except ParseError:
            continue
        out[-1].rows.append((len(raw) - len(raw.lstrip(" ")), section, parts[0], ops, nbytes))
    return out


def top_rows(rep: Report, data_names: list[str]) -> dict[str, tuple[int, int]]:
    """The report's rows of the data vdevs, by their `rebal status` names: a row named as one of them
    (OpenZFS: mirror-0, raidz1-1, a disk), else the next data vdev of its kind in order (zfs-fuse
    prints `mirror`, `raidz1`). Rows at the pool's level, of devices below a group, or of other
    classes are left out."""
    out: dict[str, tuple[int, int]] = {}
    left = list(data_names)
    for indent, section, name, ops, nbytes in rep.rows:
        if indent != 2 or section != "normal":
            continue
        pick = name if name in left else next((n for n in left if n.split("-")[0] == name), None)
        if pick is None:
            continue
        left.remove(pick)
        out[pick] = (ops, nbytes)
    return out


def pick_files(paths: list[str], host: ZfsHost, budget: int, seed: int):
    pool, objs = collect(paths, host)
    objs.sort(key=lambda o: o.path)
    random.Random(seed).shuffle(objs)
    chosen, total = [], 0
    for o in objs:
        if total >= budget:
            break
        if o.alloc:
            chosen.append(o)
            total += o.alloc
    return pool, chosen


def read_cold(path: bytes) -> int:
    """Read a file whole, its page cache dropped first; the bytes read."""
    n = 0
    try:  # (no atime written for a measurement; only the owner or root may ask that)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0))
    except PermissionError:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while True:
            got = os.read(fd, CHUNK)
            if not got:
                return n
            n += len(got)
    finally:
        os.close(fd)


def measure_read(paths: list[str], host: ZfsHost, *, budget: int = 1 << 30, seed: int = 0,
                 settle_timeout: float = 10.0) -> ReadResult:
    pool, files = pick_files(paths, host, budget, seed)
    [p] = host.pools([pool])
    names = [v.name for v in p.data_vdevs]
    res = ReadResult(pool, [os.path.realpath(x) for x in paths])
    lines: list[tuple[float, str]] = []
    seen = threading.Condition()
    proc = host.iostat(pool)

    def reader():
        for raw in iter(proc.stdout.readline, b""):
            with seen:
                lines.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))
                seen.notify_all()

    t = threading.Thread(target=reader, name="rebal-iostat", daemon=True)
    t.start()

    def reports_after(at: float, n: int, timeout: float) -> bool:
        """Wait until ``n`` reports began after ``at``."""
        deadline = time.monotonic() + timeout
        with seen:
            while sum(1 for a, s in lines if a > at and s.strip().startswith(HEADER)) < n:
                if proc.poll() is not None or not seen.wait(max(0.0, deadline - time.monotonic())):
                    return sum(1 for a, s in lines if a > at and s.strip().startswith(HEADER)) >= n
        return True

    try:
        if not reports_after(0.0, 1, settle_timeout):  # the first report: averages since the import, not counted
            raise RebalError(f"zpool iostat -v {pool} 1 printed no report: {' '.join(s for _, s in lines[-3:])}")
        t0 = time.monotonic()
        for o in files:
            try:
                res.bytes_read += read_cold(o.path)
                res.files_read += 1
            except OSError:
                continue  # (gone since it was listed)
        t1 = time.monotonic()
        res.seconds = t1 - t0
        reports_after(t1, 2, settle_timeout)  # the second that held the last reads, reported whole
    finally:
        end(proc, grace=2.0)
        t.join(timeout=5)
    reps = parse_reports(lines)[1:]
    counted = [r for r in reps if t0 < r.at <= t1 + 2.5]
    sums = {n: [0, 0] for n in names}
    for r in counted:
        for n, (ops, nbytes) in top_rows(r, names).items():
            sums[n][0] += ops
            sums[n][1] += nbytes
    res.disk_bytes = sum(b for _, b in sums.values())
    ops_total = sum(o for o, _ in sums.values())
    for n in names:
        ops, nbytes = sums[n]
        res.vdevs.append({"name": n, "bytes": nbytes, "ops": ops,
                          "share_bytes": round(nbytes / res.disk_bytes, 4) if res.disk_bytes else 0.0,
                          "share_ops": round(ops / ops_total, 4) if ops_total else 0.0})
    res.notes.append(f"{res.files_read} file(s) read whole, in a seeded random order (seed {seed}), up to "
                     f"{budget} bytes; {len(counted)} one-second report(s) of zpool iostat summed")
    if res.bytes_read and res.disk_bytes < 0.5 * res.bytes_read:
        res.notes.append(f"only {100 * res.disk_bytes / res.bytes_read:.0f}% of the bytes read came from the disks: "
                         "the rest was in the ARC (export and import the pool, or read a tree bigger than the ARC, "
                         "for a cold reading); the shares are of what the disks read")
    if p.source == "iostat":
        res.notes.append("zfs-fuse: the shares are real, the throughput is FUSE's and one daemon's, not the disks'")
    return res
