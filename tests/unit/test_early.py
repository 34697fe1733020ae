"""Queries started early (rebal.early): runner.run takes the answer of exactly that command line once,
reports it as its own, and what nobody took is ended; the fast path starts what prepare asks first."""

import os
import subprocess
import sys

import pytest

from rebal import early, runner
from rebal.cli import fast
from rebal.errors import CommandFailed
from rebal.zfs import queries

PID = [sys.executable, "-c", "import os, sys; print(os.getpid()); print('on stderr', file=sys.stderr)"]


@pytest.fixture(autouse=True)
def _clean():
    early.drop()
    yield
    early.drop()


def test_run_takes_the_early_process_once_and_reads_its_whole_answer():
    early.start([PID])
    proc = early._started[tuple(PID)]
    res = runner.run(PID)
    assert res.stdout.strip() == str(proc.pid)  # the answer of the process started early
    assert res.stderr.strip() == "on stderr" and res.returncode == 0
    assert early.started() == []
    again = runner.run(PID)  # taken once: the next call runs it anew
    assert again.stdout.strip() != str(proc.pid)


def test_a_failed_early_command_is_reported_as_the_callers_own():
    argv = [sys.executable, "-c", "import sys; sys.exit('cannot open pool')"]
    early.start([argv])
    with pytest.raises(CommandFailed) as e:
        runner.run(argv)
    assert e.value.returncode == 1 and "cannot open pool" in e.value.stderr
    early.start([argv])
    assert runner.run(argv, check=False).returncode == 1


def test_a_write_never_takes_an_early_process():
    early.start([PID])
    proc = early._started[tuple(PID)]
    res = runner.run(PID, readonly=False)
    assert res.stdout.strip() != str(proc.pid)
    assert early.started() == [tuple(PID)]


def test_drop_ends_what_nobody_took():
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    early.start([sleeper, ["/nonexistent/zpool", "list"]])  # one that cannot start is not kept
    proc = early._started[tuple(sleeper)]
    assert early.started() == [tuple(sleeper)]
    early.drop()
    assert proc.returncode == -9 and early.started() == []


def test_the_fast_path_starts_what_prepare_asks_first_for_datasets_named(monkeypatch):
    got = []
    monkeypatch.setattr(early, "start", got.extend)
    assert fast.start_queries(["tank/data", "tank/data/sub"], None)
    assert got == queries.first("tank", ["tank/data", "tank/data/sub"], rewrite=True)
    # `zpool status` is not among them: asked later, and only where the expansion feature is active
    # and the pool's features come with its figures, in one `zpool list`
    assert [a[:3] for a in got] == [["zpool", "list", "-v"], ["zfs", "get", "-Hp"], ["zfs", "get", "-Hp"]]
    assert got[0][-2:] == ["name,size,allocated,free,freeing,health,feature@physical_rewrite,feature@raidz_expansion",
                           "tank"]
    got.clear()
    assert fast.start_queries(["tank/data"], "copy")
    assert not any("feature@physical_rewrite" in a for argv in got for a in argv)
    assert got[0][-2].endswith(",health,feature@raidz_expansion")


@pytest.mark.parametrize("targets", [["tank/a", "other/b"], ["-tank"], ["tank/a@snap"], ["/nonexistent/dir"]])
def test_the_fast_path_starts_nothing_where_the_targets_do_not_name_one_pool(monkeypatch, targets):
    got = []
    monkeypatch.setattr(early, "start", got.extend)
    assert not fast.start_queries(targets, None)
    assert got == []


def test_the_debug_log_shows_each_command_line_quoted_as_a_shell_would_take_it(caplog):
    """The line is quoted only when written (a rewrite's argv of thousands of paths is not quoted for
    nothing), and then exactly: spaces, quotes and an empty argument survive."""
    import logging

    with caplog.at_level(logging.DEBUG, logger="rebal.cmd"):
        runner.run(["printf", "%s|", "a b", "it's", ""])
    assert "run: printf '%s|' 'a b' 'it'\"'\"'s' ''" in caplog.text
    with caplog.at_level(logging.WARNING, logger="rebal.cmd"):
        caplog.clear()
        runner.run(["true"])
    assert caplog.text == ""


def test_an_early_process_reads_as_subprocess_text_and_keeps_no_other_descriptor(tmp_path):
    r, w = os.pipe()
    os.set_inheritable(w, True)  # as a shell or systemd may hand rebal a descriptor
    try:
        argv = [sys.executable, "-c", "import os, sys; sys.stdout.write('a\\r\\nb\\n' + ' '.join(sorted(os.listdir('/proc/self/fd')))); "
                "sys.stderr.write('x' * 200000); sys.exit(3)"]
        early.start([argv])
        proc = early.take(tuple(argv))
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(r)
        os.close(w)
    lines = out.split("\n")
    assert lines[:2] == ["a", "b"] and err == "x" * 200000 and proc.returncode == 3
    # 0, 1, 2 and the listing's own descriptor: not the inheritable one this process holds
    assert str(w) not in lines[2].split()[3:] and len(lines[2].split()) == 4


def test_an_early_process_past_its_timeout_is_left_running_with_its_output_so_far():
    argv = [sys.executable, "-c", "import time; print('first', flush=True); time.sleep(600)"]
    early.start([argv])
    proc = early.take(tuple(argv))
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=0.5)
    assert proc.returncode is None
    proc.kill()
    assert proc.communicate() == ("first\n", "") and proc.returncode == -9


def test_the_first_queries_start_before_subprocess_or_re_is_loaded(tmp_path):
    code = ("import os, sys; before = {m for m in ('subprocess', 're') if m in sys.modules}\n"
            "def spy(*a, **k):\n"
            "    print(sorted(m for m in ('subprocess', 're') if m in sys.modules and m not in before), a[1][:2]); os._exit(0)\n"
            "os.posix_spawnp = spy\n"
            "from rebal.cli import fast\n"
            "fast.start_queries(['tank/data'], 'auto')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] ['zpool', 'list']"
