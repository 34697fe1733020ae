"""Every test has a time limit (tests/conftest.py): past it the test fails with where it hung.

On the host (the suite, three tests at once) and in the lane's guest alike, a hung command would
otherwise eat the whole run's bound in silence (seen: CI's suite stopped at 40 minutes with 88% of
its tests done and nothing said of which test hung). At the limit SIGALRM raises in the test's
thread, which ends the subprocess it waits on (subprocess.run kills its child on any exception)
and lets the test's fixtures destroy its pools; the failure says what was still running under the
test, for how long and in which state, whether the ZFS daemon still answers, and where every
thread of the test stood.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


class HungTestError(Exception):
    """A test outlived its limit: it fails, and the tests after it still run."""


def _stat(pid: str) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks after boot) of a process, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()  # after the command's name, which may hold spaces
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> list[str]:
    """One line per process under ``root``: pid, state, seconds alive, its command line."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(entry)) is not None:
            stats[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tick = os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    lines, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        _, state, start = stats[pid]
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        lines.append(f"  pid {pid} state {state} for {uptime - start / tick:.0f} s: {cmd[:300]}")
        todo.extend(children.get(pid, []))
    return lines


def zfs_answers(seconds: int = 20) -> str:
    """Whether the ZFS of this machine still answers a listing (a hung zfs-fuse hangs every test)."""
    try:
        r = subprocess.run(["zpool", "list", "-H", "-o", "name"], capture_output=True, timeout=seconds)
    except FileNotFoundError:
        return "no zpool command here"
    except subprocess.TimeoutExpired:
        return f"`zpool list` did not answer within {seconds} s: the ZFS daemon hangs"
    return f"`zpool list` answered (exit {r.returncode})"


def stacks() -> str:
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()


def report(nodeid: str, limit: int) -> str:
    """What a hung test leaves to read: its processes, the ZFS daemon, its threads' stacks. The
    first line (pytest's summary line of the failure) names the oldest process it waits on."""
    procs = descendants(os.getpid())
    first = procs[0].strip() if procs else "no process of its own"
    free = shutil.disk_usage(tempfile.gettempdir()).free / 2**30  # a full disk suspends sparse-file pools
    return (f"{nodeid} over its limit of {limit} s; waiting on {first[:200]}; ZFS: {zfs_answers()}; "
            f"{free:.1f} GiB free in {tempfile.gettempdir()}\n"
            "its processes still running:\n" + "\n".join(procs or ["  (none)"])
            + f"\nwhere its threads stood:\n{stacks()}")
