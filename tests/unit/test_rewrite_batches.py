"""The batched `zfs rewrite` of method rewrite: its answer read from real OpenZFS 2.4.4 output, the
command ended on a stop with its output kept, command lines kept under ARG_MAX."""

import os
import sys
import threading

from conftest import fixture_text

from rebal.process.command import run
from rebal.rebalance.inplace_pass import procs_for
from rebal.zfs.host_fs import parse_rewrite_answer

D = b"/var/tmp/fx/mnt/a dir/"
HANDED = [D + b"f1", D + b"name: with colon", D + b"empty", D + b"fifo", D + b"link", D + b"new\nline",
          b"/var/tmp/fx/mnt/gone", b"/tmp/on-tmpfs"]  # the command line of the fixture, in order


def test_the_answer_of_a_real_zfs_rewrite_v():
    ans = parse_rewrite_answer(fixture_text("rewrite-v-mixed_zfs-rewrite-v-P.txt"),
                               fixture_text("rewrite-v-mixed_zfs-rewrite-v-P.txt.stderr"), HANDED, 25)
    # named one after the other in the order handed: the name with a newline is read whole
    assert ans.done == [D + b"f1", D + b"name: with colon", D + b"empty", D + b"new\nline"]
    assert ans.failed == {b"/var/tmp/fx/mnt/gone": "No such file or directory",
                          b"/tmp/on-tmpfs": "Inappropriate ioctl for device"}
    assert ans.other == [] and ans.returncode == 25
    # the fifo and the symlink: neither rewritten nor failed (zfs rewrite passes over them)
    assert D + b"fifo" not in ans.done and D + b"link" not in ans.failed


def test_a_name_is_never_taken_for_another():
    # "a/x" was not rewritten; its neighbour's line must not be read as its own
    ans = parse_rewrite_answer("/a/xy\n", "failed to rewrite /a/x: Input/output error\n", [b"/a/x", b"/a/xy"], 5)
    assert ans.done == [b"/a/xy"] and ans.failed == {b"/a/x": "Input/output error"}
    # an error naming none of the paths is kept for the log, not pinned on a file
    ans = parse_rewrite_answer("", "internal error: out of memory\n", [b"/a/x"], 1)
    assert ans.done == [] and ans.failed == {} and ans.other == ["internal error: out of memory"]


def test_a_stop_ends_the_command_and_keeps_what_it_printed(tmp_path):
    flag = tmp_path / "printed"

    class StopOncePrinted(threading.Event):
        def is_set(self):  # the stop comes once the child has printed its first line
            return flag.exists()

    child = ("import sys, time; print('/done/one', flush=True); open(sys.argv[1], 'w').close(); "
             "time.sleep(600)")
    res = run([sys.executable, "-c", child, str(flag)], readonly=False, check=True, timeout=None,
              stop=StopOncePrinted())
    assert res.returncode < 0  # ended by the signal, not raised as a failure: the caller asked for it
    assert res.stdout == "/done/one\n"


def test_a_command_that_fails_on_its_own_is_raised_when_checked():
    import pytest

    from rebal.errors import CommandFailed

    with pytest.raises(CommandFailed):
        run([sys.executable, "-c", "import sys; sys.exit(3)"], stop=threading.Event())
    res = run([sys.executable, "-c", "print('x'); import sys; sys.exit(3)"], check=False, stop=threading.Event())
    assert (res.returncode, res.stdout) == (3, "x\n")


def test_processes_at_once():
    assert procs_for(jobs=4, nfiles=100, cores=8) == 1  # a small run: one process start
    assert procs_for(jobs=4, nfiles=1000, cores=8) == 1
    assert procs_for(jobs=4, nfiles=1024, cores=8) == 2  # cold data: two reads in flight pay
    assert procs_for(jobs=1, nfiles=50_000, cores=8) == 1
    assert procs_for(jobs=16, nfiles=50_000, cores=8) == 4
    assert procs_for(jobs=16, nfiles=50_000, cores=2) == 2  # no more than the cores


def test_paths_must_be_absolute():
    import pytest

    from rebal.zfs.host import ZfsHost

    with pytest.raises(ValueError):
        ZfsHost.here(lambda *a, **k: None).rewrite([b"-r"], True, threading.Event())


def test_a_name_that_is_not_utf8_comes_back_as_the_same_bytes():
    # what Zfs.rewrite does with a path: put its bytes on the command line as they are, read the answer back
    name = b"/p/non-utf8-\xff\xfe \xe2\x98\x83\nline"
    echo = "import os, sys; sys.stdout.buffer.write(os.fsencode(sys.argv[1]) + b'\\n')"
    res = run([sys.executable, "-c", echo, name], stop=threading.Event())
    assert res.argv[-1] is name
    assert parse_rewrite_answer(res.stdout, res.stderr, [name], res.returncode).done == [name]


def test_rewrite_hands_the_paths_to_the_command_as_bytes():
    from rebal.process.command import Result
    from rebal.zfs.host import ZfsHost

    seen = []

    def runner(argv, **kw):
        seen.append(list(argv))
        return Result(tuple(argv), 0, "".join(os.fsdecode(p) + "\n" for p in argv[4:]), "")

    paths = [b"/p/a", b"/p/\xff b"]
    ans = ZfsHost.here(runner).rewrite(paths, True, threading.Event())
    assert seen == [["zfs", "rewrite", "-v", "-P", *paths]]
    assert all(a is p for a, p in zip(seen[0][4:], paths))  # not decoded and encoded again, file by file
    assert ans.done == paths


def test_a_command_line_with_bytes_is_quoted_for_the_log_as_text():
    from rebal.process.command import line

    assert line(("zfs", "rewrite", b"/p/a b", b"/p/\xff")) == "zfs rewrite '/p/a b' '/p/\udcff'"


def test_the_output_is_handed_over_while_the_command_runs(tmp_path):
    """`on_out` sees each chunk as it comes: the child prints a line, then waits on a fifo that only
    the callback opens; were the output handed over at the end, the command would time out."""
    import pytest

    from rebal.errors import CommandFailed

    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    seen: list[bytes] = []

    def on_out(chunk: bytes) -> None:
        seen.append(chunk)
        if len(seen) == 1:
            with open(fifo, "w") as f:
                f.write("go")

    child = ("import sys; print('/one', flush=True); open(sys.argv[1]).read(); print('/two', flush=True)")
    res = run([sys.executable, "-c", child, str(fifo)], timeout=30, stop=threading.Event(), on_out=on_out)
    assert res.returncode == 0 and res.stdout == "/one\n/two\n"
    assert b"".join(seen) == b"/one\n/two\n" and b"/two" not in seen[0]
    with pytest.raises(CommandFailed, match="timed out"):  # and a deadline still ends it
        run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=0.5, stop=threading.Event())


def test_a_stop_ends_a_command_that_closed_its_output_and_goes_on(tmp_path):
    """The pipes closing is not the end: a command that closes its output and runs on is still ended
    by the stop (as `communicate` with a timeout did)."""
    flag = tmp_path / "closed"

    class StopOnceClosed(threading.Event):  # set from the second look after the pipes closed
        seen = 0

        def is_set(self):
            self.seen += flag.exists()
            return self.seen > 1

    child = ("import os, sys, time; print('/a', flush=True); os.close(1); os.close(2); "
             "open(sys.argv[1], 'w').close(); time.sleep(60)")  # ended by the stop, or it exits 0
    res = run([sys.executable, "-c", child, str(flag)], readonly=False, timeout=None, stop=StopOnceClosed())
    assert res.returncode < 0 and res.stdout == "/a\n"


def test_a_failed_command_with_bytes_arguments_says_them_as_text():
    from rebal.errors import CommandFailed

    e = CommandFailed(("zfs", "rewrite", b"/p/\xff", b"/p/b"), 1, "failed\n")
    assert str(e) == "zfs rewrite /p/\udcff: failed"


def test_a_command_killed_by_a_signal_nobody_asked_for_is_a_failure():
    """A negative exit status (killed by a signal) is returned only when the caller set its stop;
    otherwise it raises, whether the command was watched or not."""
    import threading

    import pytest

    from rebal.errors import CommandFailed
    from rebal.process.command import run

    with pytest.raises(CommandFailed):
        run(["sh", "-c", "kill -9 $$"])
    with pytest.raises(CommandFailed):
        run(["sh", "-c", "kill -9 $$"], stop=threading.Event())
    stop = threading.Event()
    stop.set()
    assert run(["sleep", "30"], stop=stop).returncode < 0
