"""The lane's verdict: a lane passes only when every test it holds ran and passed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "openzfs" / "vm"))
from lane import collected, counts, verdict  # noqa: E402


def test_collection_lines_of_pytest():
    assert collected("a::b\nc::d\n\n2 tests collected in 0.31s\n") == 2
    assert collected("x\n31/612 tests collected (581 deselected) in 2.04s\n") == 31
    assert collected("1 test collected in 0.1s") == 1
    assert collected("\nno tests collected (612 deselected) in 1.9s\n") == 0
    with pytest.raises(ValueError):
        collected("ERROR tests/x.py - ImportError\n1 error in 0.2s\n")


def test_nothing_collected_fails_unless_k_narrowed_it():
    assert verdict(5, {}, 0, narrowed=False)[0] == 1
    assert verdict(5, {}, 0, narrowed=True)[0] == 0
    # pytest exits 0 on "no tests ran" when every test was deselected by -m: still nothing proven
    assert verdict(0, {}, 0, narrowed=False)[0] == 1


def test_a_skip_fails_the_lane():
    got = counts("s.\n=== 30 passed, 1 skipped in 100.0s ===\n")
    assert got == {"passed": 30, "skipped": 1}
    rc, why = verdict(0, got, 31, narrowed=False)
    assert rc == 1 and "skipped" in why


def test_fewer_passed_than_collected_fails():
    rc, why = verdict(0, {"passed": 29}, 31, narrowed=False)
    assert rc == 1 and "29 passed of the 31" in why


def test_failures_and_interrupts():
    assert verdict(1, {"passed": 30, "failed": 1}, 31, narrowed=False)[0] == 1
    assert verdict(2, {"passed": 3}, 31, narrowed=False)[0] == 2  # interrupted
    assert verdict(1, {"passed": 30, "error": 1}, 31, narrowed=False)[0] == 1


def test_all_held_passed():
    rc, why = verdict(0, {"passed": 31}, 31, narrowed=False)
    assert rc == 0 and why == "31 passed of the 31 collected"


def test_the_guest_output_is_passed_on_and_a_hung_run_is_stopped(capfdbinary):
    from lane import streamed

    code, out = streamed(["sh", "-c", "echo one; echo two >&2; exit 3"], 60)
    assert (code, out) == (3, "one\ntwo\n")
    shown = capfdbinary.readouterr().out  # as it came, not only at the end, each line with its time
    assert b"[z 0:00] one\n" in shown and b"[z 0:00] two\n" in shown
    code, out = streamed(["sh", "-c", "echo started; exec sleep 120"], 1)
    assert (code, out) == (None, "started\n")


def _hanging_tests(tmp_path: Path) -> Path:
    """A test that hangs past a 1-second limit and one after it, under the suite's own conftest."""
    tests = Path(__file__).resolve().parents[1]
    tmp_path.mkdir()
    (tmp_path / "conftest.py").write_text(  # the suite's own conftest, under another module name
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('rebal_conftest', {str(tests / 'conftest.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "pytest_runtest_protocol = m.pytest_runtest_protocol\n")
    (tmp_path / "test_hang.py").write_text(
        "import subprocess, pytest\n"
        "@pytest.mark.lane_limit(1)\n"
        "def test_hangs():\n    subprocess.run(['sleep', '120'])\n"
        "def test_next():\n    assert True\n")
    return tmp_path


def _pytest(where: Path, env: dict, *args: str) -> tuple[str, str]:
    import subprocess

    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-W",
                        "ignore::pytest.PytestUnknownMarkWarning", *args, str(where)],
                       cwd=where, env=env, capture_output=True, text=True, timeout=100)
    return r.stdout, r.stderr


def test_a_hung_lane_test_fails_alone_with_where_it_hung(tmp_path):
    """The guest's watchdog (tests/conftest.py): a test over its lane_limit fails, the stacks of
    where it hung are in the progress log, and the next test still runs."""
    import os

    log = tmp_path / "progress.log"
    out, _ = _pytest(_hanging_tests(tmp_path / "t"), dict(os.environ, REBAL_LANE="openzfs", REBAL_LANE_PROGRESS=str(log)))
    assert "1 failed, 1 passed" in out, out
    assert "HungTestError" in out
    text = log.read_text()
    assert "start test_hang.py::test_hangs (limit 1 s)" in text
    assert "in test_hangs" in text  # faulthandler's stack of the hung test
    assert "end test_hang.py::test_next" in text


def test_a_hung_test_of_the_suite_three_at_once_fails_naming_what_it_ran(tmp_path):
    """On the host, three tests at once (pytest-xdist, as scripts/test.sh runs the suite): a hung
    test fails with the command it still waited on, its state and age, whether ZFS answers, and its
    stack; the other tests still run (CI's suite once hung 30 minutes with nothing said)."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("REBAL_LANE", "REBAL_TEST_LIMIT")}
    env["CI"] = "true"  # as .ci/run: pytest's summary lines are then whole
    out, err = _pytest(_hanging_tests(tmp_path / "t"), env, "-n", "2")
    assert "1 failed, 1 passed" in out, out
    summary = out[out.index("short test summary"):]  # the line a CI log's tail shows
    assert re.search(r"FAILED test_hang.py::test_hangs - hang.HungTestError: test_hang.py::test_hangs over its "
                     r"limit of 1 s; waiting on pid \d+ state S for \d+ s: sleep 120; ZFS: ", summary), summary
    assert "in test_hangs" in out
    assert re.search(r"hung: test_hang.py::test_hangs over its limit of 1 s; waiting on pid \d+ state S", err), err
    assert not (tmp_path / "t" / "progress.log").exists()


def test_the_guest_tests_split_into_two_streams_of_about_equal_time():
    from lane import nodeids
    from parallel import durations_from_progress, split

    listed = ("tests/a.py::t1\ntests/a.py::t2\ntests/b.py::t\ntests/c.py::t[x]\ntests/d.py::t\n\n"
              "5 tests collected in 0.3s\n")
    ids = nodeids(listed)
    assert ids == ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t", "tests/c.py::t[x]", "tests/d.py::t"]
    took = durations_from_progress("start tests/a.py::t1 (limit 900 s)\nend tests/a.py::t1 300 s\n"
                                   "end tests/a.py::t2 10 s\nend tests/b.py::t 200 s\nend tests/c.py::t[x] 90 s\n"
                                   "noise\nend tests/d.py::t 20 s\n")
    assert took["tests/a.py::t1"] == 300 and took["tests/c.py::t[x]"] == 90
    a, b = split(ids, took)
    assert a == ["tests/a.py"] and b == ["tests/b.py", "tests/c.py", "tests/d.py"]  # 310 s against 310 s
    # unknown durations: by test count; one stream: every file
    assert sorted(split(ids, {})[0] + split(ids, {})[1]) == ["tests/a.py", "tests/b.py", "tests/c.py", "tests/d.py"]
    assert split(ids, took, 1) == [["tests/a.py", "tests/b.py", "tests/c.py", "tests/d.py"]]


def test_two_streams_are_passed_on_labelled_and_a_hung_one_stops_both(capfd):
    from parallel import run_streams

    codes, outs = run_streams([["sh", "-c", "echo one"], ["sh", "-c", "echo two; exit 1"]], ["a", "b"], 60)
    assert codes == [0, 1] and outs == ["one\n", "two\n"]
    shown = capfd.readouterr().out
    assert "[a 0:00] one\n" in shown and "[b 0:00] two\n" in shown
    codes, outs = run_streams([["sh", "-c", "echo x"], ["sh", "-c", "exec sleep 120"]], ["a", "b"], 1)
    assert codes == [None, None] and outs[0] == "x\n"


def test_a_silent_stream_is_reported_while_it_is_silent():
    """A stream that prints nothing for quiet_after seconds is reported once per silence (the lane
    then prints where the guest stands), a stream that ended is not."""
    from parallel import run_streams

    seen = []
    codes, outs = run_streams([["sh", "-c", "echo a; sleep 4; echo b"], ["true"]], ["a", "b"], 60,
                              on_quiet=lambda label, quiet: seen.append((label, quiet)), quiet_after=1)
    assert codes == [0, 0] and outs[0] == "a\nb\n"
    assert [label for label, _ in seen] == ["a"] and seen[0][1] >= 1


def test_a_test_file_that_cannot_be_collected_fails_the_lane():
    """Issue 67: "2 tests collected, 1 error" held 2 and both passed: the broken file's tests were in no
    stream, and the lane said 2 of 2. The output is pytest 8's, recorded."""
    from lane import collection_errors, uncollected

    text = ("test_ok.py::test_a\ntest_ok.py::test_b\n\n==== ERRORS ====\n___ ERROR collecting test_bad.py ___\n"
            "E   ModuleNotFoundError: No module named 'nosuchmod'\n=== short test summary info ===\n"
            "ERROR test_bad.py\n!!!!! Interrupted: 1 error during collection !!!!!\n2 tests collected, 1 error in 1.42s\n")
    assert collected(text) == 2 and collection_errors(text) == ["test_bad.py"]
    rc, why = uncollected(*verdict(0, {"passed": 2}, 2, narrowed=False), collection_errors(text))
    assert rc == 1 and "could not be collected: test_bad.py" in why
    assert uncollected(0, "2 passed", collection_errors("2 tests collected in 0.1s")) == (0, "2 passed")
