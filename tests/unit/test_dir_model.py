"""The measured-placement model during a run (runstate.Run._measured_spread): the directories done
so far are folded in one at a time, with the same figures as simulating them all again, and a run
of n directories costs n simulations, not n*n/2 (29 ms a call at 10,000 done directories before)."""

from types import SimpleNamespace

import pytest

from rebal.rebalance import planner
from rebal.rebalance.planner import DirEntry, DirModel, simulate_dirs, spread
from rebal.rebalance.prepare import fills
from rebal.rebalance.runstate import Run
from rebal.zfs.model import Pool, Vdev

G = 1 << 30


def pool() -> Pool:
    vdevs = (Vdev("a", "disk", 100 * G, 80 * G, 20 * G), Vdev("b", "disk", 100 * G, 80 * G, 20 * G),
             Vdev("c", "disk", 100 * G, 0, 100 * G), Vdev("d", "disk", 100 * G, 0, 100 * G))
    return Pool("p", 400 * G, 160 * G, 240 * G, "ONLINE", vdevs)


def dirs(n: int) -> list[DirEntry]:
    # each directory 16 MiB, measured on the two old vdevs in varying shares
    return [DirEntry(f"/p/d{i:05}".encode(), 10, 16 << 20, 16 << 20, ((8 + i % 5) << 20, (8 - i % 5) << 20, 0, 0))
            for i in range(n)]


def a_run(n: int) -> Run:
    p = pool()
    ranked = planner.rank_measured(fills(p), dirs(n))
    plan = SimpleNamespace(measured=True, ranked=ranked, pinned_fraction=0.0, threshold=None)
    prep = SimpleNamespace(pool=p, plan=plan, snapshots=[], filters=None, reclaim_only=False, scan=None, done_dirs=set())
    opts = SimpleNamespace(reserve_percent=5, max_rate=None, filters=None, rewrite_all=False, target_spread=5.0)
    r = Run(prep, opts, None, None, None, None)
    r.report = SimpleNamespace(done_dirs=[])
    return r


def test_folded_one_at_a_time_it_says_what_simulating_them_all_says():
    r = a_run(300)
    ranked = r.prep.plan.ranked
    for k, d in enumerate(ranked, 1):
        r.report.done_dirs.append(d.path)
        if k % 37 == 0 or k == len(ranked):
            whole = spread(simulate_dirs(fills(r.prep.pool), ranked[:k]))
            assert r._measured_spread() == pytest.approx(whole, abs=1e-9)
    # directories about to be done are counted once, and do not stay in the model
    r2 = a_run(300)
    r2.report.done_dirs.extend(d.path for d in ranked[:100])
    with_next = r2._measured_spread(tuple(d.path for d in ranked[95:110]))
    assert with_next == pytest.approx(spread(simulate_dirs(fills(r2.prep.pool), ranked[:110])), abs=1e-9)
    assert r2._measured_spread() == pytest.approx(spread(simulate_dirs(fills(r2.prep.pool), ranked[:100])), abs=1e-9)


def test_a_run_of_n_directories_simulates_each_once(monkeypatch):
    calls = []
    real = planner._rewrite_dir
    monkeypatch.setattr(planner, "_rewrite_dir", lambda *a: calls.append(1) or real(*a))
    n = 2000
    r = a_run(n)
    for d in r.prep.plan.ranked:
        r.report.done_dirs.append(d.path)
        r.near(r.opts.target_spread)  # what the run asks after each directory
    assert len(calls) == n  # it was n*(n+1)/2 = 2,001,000


def test_the_model_stops_where_the_pool_is_full():
    p = pool()
    m = DirModel(fills(p), pinned_fraction=1.0)  # snapshots keep every old block: nothing is freed
    big = DirEntry(b"/p/big", 1, 300 * G, 300 * G, (150 * G, 150 * G, 0, 0))
    assert not m.add(big) and m.full
    assert not m.add(dirs(1)[0])  # nothing more is added after a directory found no room
    assert spread(m.fills()) == spread(simulate_dirs(fills(p), [big, dirs(1)[0]], 1.0))


def test_the_rise_guard_stops_a_run_past_its_best_spread_steered_or_not():
    """An unsteered run that went on past its best spread rewrote the whole tree and ended at 15.6
    points on OpenZFS 2.4.4 (bench/steer.py): the guard holds for it too, and the run ends incomplete
    (a new plan next time, not a resume of what is left). Not for --all."""
    import threading

    for steered in (None, 61):
        r = a_run(10)
        r.stop = threading.Event()
        r.report = SimpleNamespace(done_dirs=[], steered=steered)
        r._past_best(3.0)
        r._past_best(5.5)  # within half the target (5) of the best: goes on
        assert not r.stop.is_set() and not r.risen
        r._past_best(6.0)
        assert r.stop.is_set() and r.risen and "rose from 3.0 to 6.0" in r.stop_reason, steered
    everything = a_run(10)
    everything.all, everything.stop = True, threading.Event()
    everything._past_best(3.0)
    everything._past_best(20.0)
    assert not everything.stop.is_set()
