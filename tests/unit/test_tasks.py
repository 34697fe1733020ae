"""rebal/tasks.py against concurrent.futures: the same behaviour for what the `zfs rewrite` path uses
(a Future set once, result/exception, cancel before start, wait for the first or all with a timeout,
a pool of at most N threads in submission order, shutdown waiting for the work); and that path loads
neither concurrent.futures nor logging. Synchronised by events, never by sleeps."""

import concurrent.futures as cf
import subprocess
import sys
import threading

import pytest

from rebal import tasks

IMPLS = {"concurrent.futures": (cf, lambda n: cf.ThreadPoolExecutor(max_workers=n)), "rebal.tasks": (tasks, lambda n: tasks.Pool(n))}


@pytest.fixture(params=list(IMPLS))
def impl(request):
    return IMPLS[request.param]


def test_a_future_is_set_once(impl):
    mod, _ = impl
    f = mod.Future()
    assert not f.done()
    f.set_result(7)
    assert f.done() and f.result() == 7 and f.exception() is None
    with pytest.raises(mod.InvalidStateError):
        f.set_result(8)
    g = mod.Future()
    g.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        g.result()
    assert isinstance(g.exception(), KeyError)


def test_result_waits_with_a_timeout(impl):
    mod, _ = impl
    with pytest.raises(TimeoutError):
        mod.Future().result(timeout=0.01)


def test_wait_first_completed_returns_at_the_first_and_all_at_the_last(impl):
    mod, make = impl
    go = [threading.Event() for _ in range(3)]
    with make(3) as pool:
        fs = [pool.submit(lambda i=i: (go[i].wait(30), i)[1]) for i in range(3)]
        done, pending = mod.wait(fs, timeout=0.05, return_when=mod.FIRST_COMPLETED)
        assert done == set() and pending == set(fs)  # the timeout: nothing done
        go[1].set()
        done, pending = mod.wait(fs, return_when=mod.FIRST_COMPLETED)
        assert done == {fs[1]} and pending == {fs[0], fs[2]}
        go[0].set()
        go[2].set()
        done, pending = mod.wait(fs)
        assert done == set(fs) and not pending and [f.result() for f in fs] == [0, 1, 2]


def test_a_pool_runs_at_most_n_at_once_in_order_and_its_end_waits_for_them(impl):
    mod, make = impl
    lock, running, most, order = threading.Lock(), [0], [0], []
    release = threading.Event()
    two_in = threading.Barrier(3)

    def work(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(i)
        if i < 2:
            two_in.wait(30)  # the first two run together
        release.wait(30)
        with lock:
            running[0] -= 1
        return i * i

    with make(2) as pool:
        fs = [pool.submit(work, i) for i in range(6)]
        two_in.wait(30)
        assert not fs[2].done() and fs[5].cancel()  # waiting behind the two: can be cancelled
        release.set()
    assert most[0] == 2 and order == [0, 1, 2, 3, 4] and [f.result() for f in fs[:5]] == [0, 1, 4, 9, 16]
    assert fs[5].cancelled() and not fs[0].cancel()
    with pytest.raises(cf.CancelledError if mod is cf else tasks.CancelledError):
        fs[5].result()


def test_an_exception_in_a_call_is_its_futures(impl):
    mod, make = impl
    with make(1) as pool:
        f = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        f.result()


def test_the_rewrite_path_loads_neither_concurrent_futures_nor_logging():
    code = ("import sys; before = {m for m in ('logging', 'concurrent.futures') if m in sys.modules}\n"
            "import rebal.cli.rebalance_run, rebal.rebalance.engine, rebal.rebalance.prepare, rebal.rebalance.inplace_pass\n"
            "import rebal.runner, rebal.zfs.cli, rebal.views.rebalance, rebal.cli.progress, rebal.rebalance.snapcost\n"
            "print(sorted(m for m in ('logging', 'concurrent.futures') if m in sys.modules and m not in before))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_logging_imported_later_is_set_up_as_every_command_sets_it_up():
    code = ("from rebal.cli import fast; fast._logging_when_loaded()\n"
            "import logging; logging.getLogger('rebal.x').warning('late %s', 1); logging.getLogger('rebal.x').info('no')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stderr == "WARNING rebal.x: late 1\n"
