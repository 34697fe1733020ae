"""Steering the allocator during a rebalance: the threshold chosen from the plan and the other pools,
the planner's steered model against what OpenZFS 2.4.4 did (DESIGN.md fact 23), and the admin's
value recorded before it is changed and put back however the run ends.

The parameter's file is a file in a directory of the test's own here: OpenZFS's module has the
real one only in the lane's guest (tests/openzfs/test_steer_lane.py runs these paths there)."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess

import pytest

from rebal import state
from rebal.rebalance import steer
from rebal.rebalance.planner import VdevFill, bytes_to_target, simulate
from rebal.zfs.model import Pool, Vdev
from rebal.zfs.tunable import Parameter

G = 1 << 30


def pool(name: str, *vdevs: tuple[int, float], cls: str = "normal") -> Pool:
    vs = tuple(Vdev(f"{name}-v{i}", "mirror", size, int(size * cap), size - int(size * cap), vclass=cls)
               for i, (size, cap) in enumerate(vdevs))
    return Pool(name, sum(v.size for v in vs), sum(v.alloc for v in vs), sum(v.free for v in vs), "ONLINE", vs)


GROWN = pool("tank", (G, 0.71), (G, 0.71), (G, 0.0))  # two mirrors at 71% and a new one (the pool)


def test_the_threshold_stops_the_emptier_vdevs_a_margin_under_the_mean():
    """Never under the free percent at the mean: measured on 2.4.4 (512 MiB vdevs, 24 directories
    of 30 MiB), a threshold of 48 where the mean left 50% free let the new vdev run 6 points past
    the mean, and the run rewrote everything and ended at a spread of 5.9 (what is rewritten after
    that lands on the old vdevs); at 52 it ended at 0.4 after 9 directories."""
    c = steer.choose(GROWN, 47.3, [])  # 52.7% free at the mean, and a point
    assert c.threshold == 54 and c.lowered_for == [] and "zfs_mg_noalloc_threshold=54" in c.reason
    assert steer.choose(GROWN, 47.3, [], target=10).threshold == 58  # half the target


def test_the_steering_ends_once_a_vdev_it_fills_is_at_the_threshold():
    names = steer.receiving(GROWN, 54)
    assert names == {"tank-v2"}
    half = pool("tank", (G, 0.55), (G, 0.55), (G, 0.40))
    there = pool("tank", (G, 0.50), (G, 0.50), (G, 0.47))  # 53% free: at or below 54
    assert not steer.steered_enough(54, names, half) and steer.steered_enough(54, names, there)


def test_the_model_rewrites_what_openzfs_rewrote_steered_and_not():
    """Measured on 2.4.4 (fact 23): 952 MiB unsteered, 504 MiB at a threshold of 50, to a 2-point
    spread, 456 MiB having to move. The model within 10%."""
    v = [VdevFill(x.name, x.size, x.alloc) for x in GROWN.data_vdevs]
    free = bytes_to_target(v, 2.0, int(1.42 * G), 0.0)
    steered = bytes_to_target(v, 2.0, int(1.42 * G), 0.0, 50)
    assert abs(free / 2**20 - 952) / 952 < 0.10, free / 2**20
    assert abs(steered / 2**20 - 504) / 504 < 0.10, steered / 2**20
    after = simulate(v, steered, threshold=50)
    assert max(x.cap for x in after) - min(x.cap for x in after) <= 2.0


def test_steered_writes_go_only_to_the_vdevs_above_the_threshold_until_none_is():
    v = [VdevFill(x.name, x.size, x.alloc) for x in GROWN.data_vdevs]
    early = simulate(v, 64 << 20, threshold=51)
    assert early[0].alloc < v[0].alloc and early[1].alloc < v[1].alloc  # the old ones only lose
    late = simulate(v, int(1.4 * G), threshold=51)  # past the goal: everything is at or below, as ZFS does
    assert all(x.cap > 40 for x in late)


def test_another_pool_it_would_steer_lowers_it_below_that_pools_vdevs():
    other = pool("home", (G, 0.60), (G, 0.20))  # free 40 and 80: a threshold of 54 would steer it
    c = steer.choose(GROWN, 47.3, [other])
    assert c.lowered_for == ["home"] and c.threshold == 34, c  # home's fuller vdev stays 5 points above it
    assert "stay as they are" in c.reason


def test_not_steered_where_no_threshold_spares_the_other_pool():
    other = pool("home", (G, 0.75), (G, 0.20))  # free 25 and 80: 5 under 25 leaves tank's 28% vdevs in
    c = steer.choose(GROWN, 47.3, [other])
    assert c.threshold is None and "home" in c.reason and c.lowered_for == ["home"]


def test_pools_it_does_not_steer_leave_it_alone():
    single = pool("one", (G, 0.5))  # one vdev: nothing else to put the writes on
    level = pool("even", (G, 0.30), (G, 0.31))  # both above the threshold
    full = pool("full", (G, 0.90), (G, 0.85))  # both at or below it
    special = pool("meta", (G, 0.30), (G, 0.31), cls="special")
    assert steer.choose(GROWN, 47.3, [single, level, full, special]).threshold == 54


def test_a_level_pool_is_not_steered():
    c = steer.choose(pool("tank", (G, 0.5), (G, 0.5)), 50.0, [])
    assert c.threshold is None and c.reason.startswith("not steered")


@pytest.fixture
def conn(tmp_path):
    c = state.connect(str(tmp_path / "state.db"))
    yield c
    c.close()


@pytest.fixture
def param(tmp_path):
    d = tmp_path / "parameters"
    d.mkdir()
    (d / steer.NAME).write_text("0\n")  # the module's default
    return Parameter(steer.NAME, d)


def record(conn: sqlite3.Connection) -> dict | None:
    raw = state.Cache(conn, max_age=float("inf")).get(steer.KEY)
    return None if raw is None else json.loads(raw)


def test_the_admins_value_is_recorded_before_and_put_back_after(conn, param):
    param.write(7)  # the admin's own
    held = steer.Held(conn, param)
    assert held.take(51, run_id=3, pool="tank") is None
    assert param.read() == 51 and record(conn)["admin"] == 7 and record(conn)["run"] == 3
    assert held.give_back() is None
    assert param.read() == 7 and record(conn) is None


def test_a_second_run_on_the_host_is_not_steered(conn, param):
    other = os.open(param.path, os.O_RDONLY)
    fcntl.flock(other, fcntl.LOCK_EX)  # another process's steered run
    try:
        why = steer.Held(conn, param).take(51, 3, "tank")
        assert why and "another rebalance" in why and param.read() == 0 and record(conn) is None
        assert steer.left_behind(conn, param) is None  # a live run's value is never taken back
    finally:
        os.close(other)


def test_a_killed_run_leaves_the_record_and_the_next_command_puts_it_back(conn, param):
    param.write(5)
    held = steer.Held(conn, param)
    assert held.take(40, 9, "tank") is None
    held.release()  # killed: the kernel drops its lock, nothing is given back
    assert param.read() == 40 and record(conn) is not None
    said = steer.left_behind(conn, param)
    assert said and "put zfs_mg_noalloc_threshold back to 5" in said and "run 9" in said, said
    assert param.read() == 5 and record(conn) is None
    assert steer.left_behind(conn, param) is None  # once


def test_a_value_changed_since_is_left_as_it_is(conn, param):
    held = steer.Held(conn, param)
    assert held.take(40, 9, "tank") is None
    held.release()
    param.write(12)  # the admin set one of his own meanwhile
    said = steer.left_behind(conn, param)
    assert said and "left as it is" in said and param.read() == 12 and record(conn) is None


def test_after_a_reboot_there_is_nothing_to_put_back(conn, param):
    held = steer.Held(conn, param)
    assert held.take(40, 9, "tank") is None
    held.release()
    rec = record(conn) | {"boot": "another-boot"}
    state.Cache(conn).set(steer.KEY, json.dumps(rec))
    param.write(0)  # the module came back with its default
    assert steer.left_behind(conn, param) is None and record(conn) is None and param.read() == 0


def test_a_parameter_that_cannot_be_written_leaves_the_run_unsteered(conn, tmp_path):
    """As in a unit whose /sys is read-only (ProtectKernelTunables without the drop-in): a read-only
    tmpfs as root (root writes through a file's mode), the file's mode otherwise."""
    d = tmp_path / "ro"
    d.mkdir()
    mounted = os.geteuid() == 0
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(d)], check=True)
    try:
        (d / steer.NAME).write_text("3\n")
        if mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        else:
            os.chmod(d / steer.NAME, 0o444)
        param = Parameter(steer.NAME, d)
        why = steer.Held(conn, param).take(51, 3, "tank")
        assert why and why.startswith("not steered") and "cannot be written" in why, why
        assert record(conn) is None and param.read() == 3
    finally:
        if mounted:
            subprocess.run(["umount", str(d)], check=True)


def test_where_zfs_has_no_such_parameter_the_plan_says_so(tmp_path):
    from rebal.rebalance.planner import make_plan

    plan = make_plan([VdevFill(x.name, x.size, x.alloc) for x in GROWN.data_vdevs], [], 2.0)
    choice, same, un = steer.steer_plan(GROWN, plan, lambda t: plan, lambda: [], Parameter(steer.NAME, tmp_path))
    assert choice.threshold is None and "has no zfs_mg_noalloc_threshold" in choice.reason and same is plan and un is None


def test_a_value_that_cannot_be_put_back_is_said_once_not_at_every_measurement(conn, param):
    """Steering's end tried give_back at each measurement while it failed, saying so each time."""
    from types import SimpleNamespace

    from rebal.rebalance import engine

    held = steer.Held(conn, param)
    assert held.take(40, 9, "tank") is None
    param.path.unlink()
    param.path.mkdir()  # now it cannot be written (EISDIR)
    notes: list[str] = []
    r = SimpleNamespace(steering=None, on_measured=None, last_pool=None)
    engine._steering_ends(r, held, SimpleNamespace(pool=GROWN), SimpleNamespace(note=notes.append))
    level = pool("tank", (G, 0.6), (G, 0.6), (G, 0.6))  # the emptier vdev is at the threshold (40% free)
    for _ in range(3):
        if r.on_measured is not None:
            r.on_measured(level)
    assert len(notes) == 1 and "could not put" in notes[0], notes
    assert r.steering is None and record(conn) is not None  # the record stays for the next command
