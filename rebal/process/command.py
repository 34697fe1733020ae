"""One external command: argument tuples only, never a shell; the exact command line logged; a
timeout; a call marked ``readonly=False`` skipped under dry-run (reads still happen, so a dry run
shows real figures); known failure texts turned into typed errors with a message the admin can act
on. A command may be stoppable (a threading.Event ends it at once) and hand its output on as it
comes. `spawn` starts a process that lives beside rebal and `end` ends it.
"""

from __future__ import annotations

import logging
import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol, Union

from ..errors import (
    CommandFailed,
    PermissionDenied,
    ToolMissing,
    UnsupportedOption,
    ZfsUnavailable,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0
DEVNULL = subprocess.DEVNULL
PIPE = subprocess.PIPE
STOP_GRACE = 30.0  # seconds between SIGTERM and SIGKILL of a stopped command

# Texts that mean "ZFS is there but not answering" (zfs-fuse daemon down, module not loaded).
_UNAVAILABLE = (
    "make sure that the zfs-fuse daemon is running",
    "failed to initialize zfs library",
    "the zfs modules cannot be auto-loaded",
    "/dev/zfs and /proc/self/mounts are required",
)
_USAGE = ("invalid option", "unrecognized command", "usage:")

class Counted:
    """A runner (the signature of ``run``) that counts the commands it ran: one per run of a job, so
    two jobs running at once in the daemon's threads each count their own. Thread-safe (a run's
    parallel sends and listings use it at once)."""

    def __init__(self, runner: Callable[..., Result] | None = None) -> None:
        self.runner = runner or run
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, argv: Argv, **kw: Any) -> Result:
        try:
            return self.runner(argv, **kw)
        finally:
            with self._lock:
                self.n += 1


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str | bytes, ...]  # (a file name may go out as bytes)
    returncode: int
    stdout: str
    stderr: str


PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def env(extra: dict[str, str] | None = None, inherit: bool = True) -> dict[str, str]:
    """The environment of every command rebal runs: parsers read English, C-locale number formats.
    ``inherit`` False: nothing of rebal's own environment but a plain PATH (an admin's hook)."""
    out = dict(os.environ) if inherit else {"PATH": PLAIN_PATH}
    out["LC_ALL"] = "C"
    out.pop("LANGUAGE", None)
    return out | (extra or {})


def text(data: bytes) -> str:
    """A command's output as text, decoded as file names are (a path read back is the bytes that went out)."""
    return os.fsdecode(data) if data else ""


Argv = Sequence[Union[str, bytes]]
Stream = Union[int, IO[Any], None]  # DEVNULL, PIPE, None (rebal's own) or an open file


def line(argv: Argv) -> str:
    return shlex.join(os.fsdecode(a) for a in argv)


class Stopping(Protocol):
    """What ends a command at once when set: a threading.Event, or anything that says so."""

    def is_set(self) -> bool: ...


Runner = Callable[..., Result]  # how a command runs: run() itself, or a test's or a run's counting stand-in


def run(
    argv: Argv,
    *,
    readonly: bool = True,
    dry_run: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    check: bool = True,
    input: str | bytes | None = None,
    stop: Stopping | None = None,
    on_out: Callable[[bytes], None] | None = None,
    environ: dict[str, str] | None = None,
    inherit_env: bool = True,
) -> Result:
    """Run one command to its end. Raises a typed error on failure unless ``check`` is False.

    ``stop`` (a threading.Event): the command is ended (SIGTERM, SIGKILL after STOP_GRACE) as soon as
    it is set; its output so far is returned with a negative exit status, never raised (the caller
    asked for the stop). ``on_out``: called with each chunk of standard output (bytes) as it arrives,
    on the calling thread, so a long command's progress can be seen while it runs. ``environ``: set
    in the command's environment, over rebal's own (``inherit_env`` False: over a plain PATH alone)."""
    args: tuple[str | bytes, ...] = tuple(a if isinstance(a, bytes) else str(a) for a in argv)
    argv = args
    if dry_run and not readonly:
        log.info("dry-run, not running: %s", line(argv))
        return Result(argv, 0, "", "")
    if log.isEnabledFor(logging.DEBUG):
        log.debug("run: %s", line(argv))
    if isinstance(input, str):
        input = os.fsencode(input)
    if stop is None and on_out is None:
        try:
            proc = subprocess.run(argv, input=input, capture_output=True, timeout=timeout, env=env(environ, inherit_env),
                                  stdin=None if input is not None else DEVNULL)
        except subprocess.TimeoutExpired:
            raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s") from None
        except OSError as e:
            raise _not_started(argv, e) from None
        res = Result(argv, proc.returncode, text(proc.stdout), text(proc.stderr))
    else:
        res = _run_watched(argv, timeout, stop, on_out, input, env(environ, inherit_env))
    if res.returncode != 0:
        log.debug("exit %d: %s: %s", res.returncode, line(argv), res.stderr.strip()[:500])
        asked_to_stop = res.returncode < 0 and stop is not None and stop.is_set()
        if check and not asked_to_stop:  # (a command killed by a signal nobody asked for is a failure)
            raise classify(res)
    return res


def _not_started(argv: Argv, e: OSError) -> Exception:
    if isinstance(e, FileNotFoundError):
        tool = os.fsdecode(argv[0])
        hint = "; install ZFS first" if tool in ("zfs", "zpool", "zdb") else ""
        return ToolMissing(f"{tool} is not installed (or not on PATH){hint}")
    if isinstance(e, PermissionError):
        return PermissionDenied(f"not allowed to run {os.fsdecode(argv[0])}")
    return CommandFailed(argv, -1, f"cannot start: {e.strerror}")


def _run_watched(argv: tuple[str | bytes, ...], timeout: float | None, stop: Stopping | None,
                 on_out: Callable[[bytes], None] | None, input: bytes | None, environ: dict) -> Result:
    """Read both pipes as the output comes (each chunk of stdout to ``on_out``); every 0.2 s look at
    the stop and the deadline. In a session of its own: a ^C at the terminal reaches rebal, which
    ends the command at a safe point, not the command first."""
    try:
        proc = subprocess.Popen(argv, stdout=PIPE, stderr=PIPE, stdin=DEVNULL if input is None else PIPE,
                                env=environ, start_new_session=True)
    except OSError as e:
        raise _not_started(argv, e) from None
    assert proc.stdout is not None and proc.stderr is not None  # (PIPE: both are there)
    if input is not None:  # small inputs only (a list of names): written whole, then closed
        assert proc.stdin is not None
        proc.stdin.write(input)
        proc.stdin.close()
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
            stopping = stop is not None and stop.is_set()
            if ended_at is None and (stopping or (deadline is not None and now > deadline)):
                log.debug("stopping: %s", line(argv))
                timed_out = not stopping
                proc.send_signal(signal.SIGTERM)
                ended_at = now
            elif ended_at is not None and now > ended_at + STOP_GRACE and proc.poll() is None:
                proc.kill()
        proc.wait()
    if timed_out:
        raise CommandFailed(argv, -1, f"timed out after {timeout:.0f} s")
    return Result(argv, proc.returncode, text(b"".join(chunks[out_fd])), text(b"".join(chunks[err_fd])))


Process = subprocess.Popen  # a process started by spawn, for the layers above to name


def spawn(argv: list[str], *, stdin: Stream = DEVNULL, stdout: Stream = DEVNULL, stderr: Stream = DEVNULL, new_session: bool = True) -> subprocess.Popen:
    """Start a process that lives beside rebal (an ssh master connection, a stage of a pipeline) and
    hand it back; `end` ends it. ``stdin``/``stdout``/``stderr``: DEVNULL, PIPE, None (rebal's own)
    or an open file."""
    log.debug("start: %s", line(argv))
    try:
        return subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env(),
                                start_new_session=new_session)
    except OSError as e:
        raise _not_started(argv, e) from None


def end(proc: subprocess.Popen, grace: float = 5.0) -> int:
    """End a spawned process (SIGTERM to its group, SIGKILL after ``grace`` seconds) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            proc.terminate()
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def classify(res: Result) -> Exception:
    """Turn a failed result into the most specific error."""
    err = res.stderr.lower()
    if "permission denied" in err or "must be root" in err or "insufficient privileges" in err:
        return PermissionDenied(f"{os.fsdecode(res.argv[0])}: permission denied; run rebal as root")
    if any(t in err for t in _UNAVAILABLE):
        hint = "start it with: zfs-fuse" if "zfs-fuse" in err else "is the zfs kernel module loaded?"
        return ZfsUnavailable(f"ZFS is not answering ({hint})")
    if res.returncode == 2 and any(t in err for t in _USAGE):
        return UnsupportedOption(res.argv, res.returncode, res.stderr)
    return CommandFailed(res.argv, res.returncode, res.stderr)
