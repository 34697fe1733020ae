"""Steering the allocator while a rebalance rewrites (DESIGN.md fact 23): ZFS leaves out a vdev whose
free percent is at or below `zfs_mg_noalloc_threshold` while another vdev of its class is above it.
Set for the run to just under the free percent every vdev will have at the goal, the rewritten data
lands on the emptier vdevs only, and a rebalance rewrites about what has to move (1.1x) instead of
twice it.

The parameter is host-wide and reset at boot. So: one steered run per host at a time (a lock on
the parameter itself); the threshold is lowered below every vdev of another pool that it would
steer too (their writes are left as they are) and steering is left out where that takes its effect
away; the admin's value is recorded in the state database before it is changed and put back when
the run ends however it ends; a run killed outright leaves the record, and the next rebalance,
`rebal status` and `rebal health` put the value back (a reboot already has)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..state import Cache
from ..zfs.model import Pool, Vdev
from ..zfs.tunable import Parameter, boot_id

if TYPE_CHECKING:
    from .planner import Plan

NAME = "zfs_mg_noalloc_threshold"
KEY = "steer"  # the kv row of a steered run: the admin's value, the one set, the boot, the run
OTHERS_MARGIN = 5  # points another pool's vdevs stay above the threshold (they fill while the run goes on)
ALLOCATING = ("normal", "special", "dedup")  # the classes whose groups the threshold steers (not log)


@dataclass
class Choice:
    threshold: int | None  # None: the run is not steered
    reason: str  # what the plan says of it
    lowered_for: list[str] = field(default_factory=list)  # other pools the threshold was lowered for


def free_percent(space: int, alloc: int) -> int:
    """A vdev's free space in whole percent of what it allocates from (zpool's ALLOC + FREE, not
    its SIZE: the pool's reserved metaslab is not in it), as ZFS counts it for the threshold."""
    return int(max(space - alloc, 0) * 100 // (space + 1)) if space else 0


def _space(v: Vdev) -> int:
    return v.alloc + v.free if v.exact and v.free else v.size


def _groups(pool: Pool) -> list[list[int]]:
    """The free percents of each allocation class's vdevs (a class with two or more can be steered)."""
    by: dict[str, list[int]] = {}
    for v in pool.vdevs:
        if v.vclass in ALLOCATING and v.size:
            by.setdefault(v.vclass, []).append(free_percent(_space(v), v.alloc))
    return [f for f in by.values() if len(f) >= 2]


def choose(pool: Pool, final_cap: float, others: list[Pool], target: float = 2.0) -> Choice:
    """The threshold for a rebalance of ``pool`` whose vdevs are to end near ``final_cap`` percent
    (of what they allocate from): the emptier vdevs take every new block until they are a margin
    (half the target, at least a point) under it, then none (never past it: data rewritten after
    an emptier vdev went past the mean lands on the fuller ones and cannot bring it back); the
    fuller ones take nothing meanwhile. Lowered below every vdev of another pool it would steer
    as well."""
    t = min(99, math.ceil(100.0 - final_cap + max(1.0, target / 2)))
    lowered: list[str] = []
    changed = True
    while changed and t >= 0:  # lowering it for one pool can bring it into another's range
        changed = False
        for other in others:
            for frees in _groups(other):
                # its fullest vdev a margin above the threshold: the pool's own writes during the run
                # must not bring it down to it (measured: 1 point was not enough)
                if min(frees) <= t + OTHERS_MARGIN and t < max(frees):
                    t, changed = min(frees) - OTHERS_MARGIN - 1, True
                    lowered.append(other.name)
    ours = [free_percent(_space(v), v.alloc) for v in pool.data_vdevs if v.size]
    names = ", ".join(sorted(set(lowered)))
    if t < 0 or len(ours) < 2 or not (min(ours) <= t < max(ours)):
        why = (f"not steered: pool(s) {names} would be steered too (their vdevs are apart at every threshold "
               f"that steers {pool.name})") if lowered else f"not steered: no threshold leaves out only {pool.name}'s fuller vdevs"
        return Choice(None, why, sorted(set(lowered)))
    said = f"steered: {NAME}={t} while it runs (vdevs with {t}% free or less take no new data while another has more)"
    if lowered:
        said += f"; lowered so the writes of pool(s) {names} stay as they are"
    return Choice(t, said, sorted(set(lowered)))


def receiving(pool: Pool, threshold: int) -> set[str]:
    """The data vdevs a steered run writes to: those above the threshold."""
    return {v.name for v in pool.data_vdevs if v.size and free_percent(_space(v), v.alloc) > threshold}


def room(threshold: int, names: set[str], pool: Pool) -> int:
    """Bytes the vdevs taking the steered writes can still take before they reach the threshold."""
    out = 0
    for v in pool.data_vdevs:
        if v.name in names:
            space = _space(v)
            out += max(0, int(space - (threshold + 1) * (space + 1) / 100) - v.alloc)
    return out


def steered_enough(threshold: int, names: set[str], now: Pool) -> bool:
    """The vdevs that took the steered writes are at the threshold, or within a few metaslabs'
    worth of it (half a percent of their space, 8 MiB at least): the steering has done its part,
    and the rest of the run goes as ZFS would place it. Kept on, the vdevs would take turns by the
    threshold: the fuller ones allocatable again first, the data rewritten from them would land
    back on them."""
    total = sum(_space(v) for v in now.data_vdevs if v.name in names)
    return (room(threshold, names, now) < max(8 << 20, total // 200)
            or any(v.name in names and free_percent(_space(v), v.alloc) <= threshold for v in now.data_vdevs))


def steer_plan(pool: Pool, plan: Plan, replan: Callable[[int], Plan], others: Callable[[], list[Pool]],
               param: Parameter | None = None) -> tuple[Choice, Plan, Plan | None]:
    """(the choice, the plan the run follows, the unsteered plan where it is steered): the threshold
    from where the unsteered plan ends, the plan again with it."""
    param = param or Parameter(NAME)
    if not param.exists():
        return Choice(None, f"not steered: this ZFS has no {NAME} (zfs-fuse, or not OpenZFS's kernel module): "
                            "the rewrites land where ZFS puts them"), plan, None
    space = sum(v.space or v.size for v in plan.after) or 1
    choice = choose(pool, 100.0 * sum(v.alloc for v in plan.after) / space, [p for p in others() if p.name != pool.name],
                    plan.target)
    if choice.threshold is None:
        return choice, plan, None
    return choice, replan(choice.threshold), plan


class Held:
    """The parameter changed for one run: the lock on it (host-wide) and the record in the state
    database, both taken before the value is written; let go in the order that leaves no gap."""

    def __init__(self, conn: sqlite3.Connection, param: Parameter) -> None:
        self.conn, self.param = conn, param
        self.fd = -1
        self.record: dict | None = None

    def take(self, threshold: int, run_id: int, pool: str) -> str | None:
        """Steer; None when done, else why the run goes unsteered."""
        self.fd = _lock(self.param)
        if self.fd < 0:
            return "not steered: another rebalance on this host steers the allocator now"
        admin = self.param.read()
        if admin is None:
            self.release()
            return "not steered: this ZFS has no " + NAME
        self.record = {"admin": admin, "set": threshold, "boot": boot_id(), "pid": os.getpid(), "run": run_id,
                       "pool": pool}
        Cache(self.conn).set(KEY, json.dumps(self.record))  # before the change: a kill after it finds this
        try:
            self.param.write(threshold)
        except OSError as e:
            Cache(self.conn).forget(KEY)
            self.record = None
            self.release()
            return f"not steered: {self.param.path} cannot be written ({e.strerror})"
        return None

    def give_back(self) -> str | None:
        """Put the admin's value back; a problem is returned (the record stays for the next command)."""
        if self.record is None:
            return None
        try:
            self.param.write(self.record["admin"])
        except OSError as e:
            self.release()
            return (f"could not put {NAME} back to {self.record['admin']} ({e.strerror}): "
                    f"the next rebal status or rebalance as root does it")
        Cache(self.conn).forget(KEY)  # then the lock: no other command sees the record without the run
        self.record = None
        self.release()
        return None

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _lock(param: Parameter) -> int:
    """An exclusive lock on the parameter's file (host-wide, whatever state database a run uses);
    -1 where another process holds it."""
    try:
        fd = os.open(param.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return -1
    return fd


def left_behind(conn: sqlite3.Connection, param: Parameter) -> str | None:
    """A steered run that died (killed, power kept) left the threshold set: put the admin's value
    back, and say so ("could not" where it was not put back). Nothing while the run that set it
    still lives (it holds the lock)."""
    cache = Cache(conn, max_age=math.inf)
    raw = cache.get(KEY)
    if raw is None:
        return None
    rec = json.loads(raw)
    if rec.get("boot") != boot_id():
        cache.forget(KEY)  # the reboot put the module's default back
        return None
    fd = _lock(param)
    if fd < 0:
        return None if param.exists() else _forget(cache, None)  # it runs (or the module is gone)
    try:
        now = param.read()
        if now is None:
            return _forget(cache, None)
        if now != rec["set"]:
            return _forget(cache, f"{NAME} is {now}, not the {rec['set']} rebalance run {rec['run']} set before it "
                                  "died: left as it is (changed since by someone else)")
        try:
            param.write(rec["admin"])
        except OSError as e:
            return (f"rebalance run {rec['run']} died with {NAME} set to {rec['set']}: it could not be put back "
                    f"to the admin's value {rec['admin']} here ({e.strerror}): run rebal status as root")
        return _forget(cache, f"put {NAME} back to {rec['admin']}: rebalance run {rec['run']} of pool {rec['pool']} "
                              f"died with it set to {rec['set']}")
    finally:
        os.close(fd)


def _forget(cache: Cache, said: str | None) -> str | None:
    cache.forget(KEY)
    return said
