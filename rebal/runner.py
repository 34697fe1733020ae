"""The one gateway for every external command.

Argument tuples only, never a shell. Each call is logged with its exact command line. A call marked
``readonly=False`` is skipped under dry-run (reads still happen, so a dry run shows real figures).
Known failure texts become typed errors with a message the admin can act on.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from . import early
from .errors import (
    CommandFailed,
    PermissionDenied,
    ToolMissing,
    UnsupportedOption,
    ZfsUnavailable,
)
from dataclasses import dataclass



class _Log:
    """The "rebal.cmd" logger, without importing `logging` where nothing set it up: until something
    imports it no handler exists and the root's level is WARNING, so a debug or info record is dropped
    either way (a `zfs rewrite` rebalance never imports it: rebal/tasks.py)."""

    __slots__ = ()

    def _logger(self):
        import logging

        return logging.getLogger("rebal.cmd")

    def debug(self, *args) -> None:
        if "logging" in sys.modules:
            self._logger().debug(*args)

    def info(self, *args) -> None:
        if "logging" in sys.modules:
            self._logger().info(*args)


log = _Log()

DEFAULT_TIMEOUT = 120.0

# Texts that mean "ZFS is there but not answering" (zfs-fuse daemon down, module not loaded).
_UNAVAILABLE = (
    "make sure that the zfs-fuse daemon is running",
    "failed to initialize zfs library",
    "the zfs modules cannot be auto-loaded",
    "/dev/zfs and /proc/self/mounts are required",
)
_USAGE = ("invalid option", "unrecognized command", "usage:")


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str | bytes, ...]  # (a file name may go out as bytes)
    returncode: int
    stdout: str
    stderr: str


_env = early.env  # parsers read English, C-locale number formats


CALLS = [0]  # commands run by this process (the replication reports how many a run took)


def run(
    argv: list[str] | tuple[str, ...],
    *,
    readonly: bool = True,
    dry_run: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    check: bool = True,
    input: str | None = None,
    stop=None,
    on_out=None,
) -> Result:
    """Run one command. Raises a typed error on failure unless ``check`` is False.

    ``stop`` (a threading.Event): the command is ended (SIGTERM) as soon as it is set; its output so
    far is returned with a negative exit status, never raised (the caller asked for the stop).
    ``on_out`` (with ``stop``): called with each chunk of standard output (bytes) as it arrives, on
    the calling thread, so a long command's progress can be seen while it runs."""
    argv = tuple(a if a.__class__ is bytes else str(a) for a in argv)  # bytes (file names) go out as they are
    line = _Line(argv)
    if dry_run and not readonly:
        log.info("dry-run, not running: %s", line)
        return Result(argv, 0, "", "")
    log.debug("run: %s", line)
    CALLS[0] += 1
    if stop is not None:
        res = _run_stoppable(argv, line, timeout, stop, on_out)
        if check and res.returncode > 0:
            raise classify(res)
        return res
    proc = early.take(argv) if readonly and input is None else None
    if proc is not None:  # started before this code was loaded (early.py): its answer, once
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s") from None
        proc = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    else:
        proc = _start(argv, input, timeout)
    res = Result(argv, proc.returncode, proc.stdout, proc.stderr)
    if proc.returncode != 0:
        log.debug("exit %d: %s: %s", proc.returncode, line, proc.stderr.strip()[:500])
        if check:
            raise classify(res)
    return res


class _Line:
    """A command line as the log shows it, quoted only when a message is written: a `zfs rewrite` of
    thousands of paths is not quoted path by path for a debug line nobody reads (issue 19)."""

    __slots__ = ("argv",)

    def __init__(self, argv: tuple[str, ...]) -> None:
        self.argv = argv

    def __str__(self) -> str:
        return shlex.join(os.fsdecode(a) for a in self.argv)


def _start(argv: tuple[str, ...], input: str | None, timeout: float | None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout,
            env=_env(),
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} is not installed (or not on PATH); install ZFS first") from None
    except PermissionError:
        raise PermissionDenied(f"not allowed to run {argv[0]}") from None
    except subprocess.TimeoutExpired:
        raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s") from None


def _run_stoppable(argv: tuple[str, ...], line: _Line, timeout: float | None, stop, on_out=None) -> Result:
    """Read both pipes as the output comes (each chunk of stdout to ``on_out``); every 0.2 s look at
    the stop and the deadline: SIGTERM then, SIGKILL 30 s later if it is still there."""
    import selectors
    import signal
    import sys
    import time

    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=_env())
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} is not installed (or not on PATH); install ZFS first") from None
    except PermissionError:
        raise PermissionDenied(f"not allowed to run {argv[0]}") from None
    deadline = None if timeout is None else time.monotonic() + timeout
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    ended_at = None  # when it was sent SIGTERM
    timed_out = False
    with proc, selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map() or proc.poll() is None:  # (a process may close its pipes and go on)
            if not sel.get_map():
                try:
                    proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    pass
            for key, _ev in sel.select(timeout=0.2) if sel.get_map() else ():
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                chunks[key.fd].append(chunk)
                if on_out is not None and key.fd == out_fd:
                    on_out(chunk)
            now = time.monotonic()
            if ended_at is None and (stop.is_set() or (deadline is not None and now > deadline)):
                log.debug("stopping: %s", line)
                timed_out = not stop.is_set()
                proc.send_signal(signal.SIGTERM)
                ended_at = now
            elif ended_at is not None and now > ended_at + 30 and proc.poll() is None:
                proc.kill()
        proc.wait()
    if timed_out:
        raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s")
    # decoded as file names are (os.fsdecode), so a path read back is the bytes that went out
    enc = sys.getfilesystemencoding()
    out = b"".join(chunks[out_fd]).decode(enc, "surrogateescape")
    err = b"".join(chunks[err_fd]).decode(enc, "surrogateescape")
    res = Result(argv, proc.returncode, out, err)
    if proc.returncode > 0:
        log.debug("exit %d: %s: %s", proc.returncode, line, err.strip()[:500])
    return res


def classify(res: Result) -> Exception:
    """Turn a failed result into the most specific error."""
    err = res.stderr.lower()
    if "permission denied" in err or "must be root" in err or "insufficient privileges" in err:
        return PermissionDenied(f"{res.argv[0]}: permission denied; run rebal as root")
    if any(t in err for t in _UNAVAILABLE):
        hint = "start it with: zfs-fuse" if "zfs-fuse" in err else "is the zfs kernel module loaded?"
        return ZfsUnavailable(f"ZFS is not answering ({hint})")
    if res.returncode == 2 and any(t in err for t in _USAGE):
        return UnsupportedOption(res.argv, res.returncode, res.stderr)
    return CommandFailed(res.argv, res.returncode, res.stderr)
