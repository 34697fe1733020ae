"""Read-only commands started before the code that asks for them is loaded.

A rebalance asks the pool four things before it can scan (issue 19): each is a zfs/zpool process of
about 0.1 s of CPU in the lane's 2-vCPU guest, and loading rebal's modules is 0.7 s of CPU in one
thread. `rebal rebalance`'s fast path knows the pool and datasets from the command line and the
mount table alone, so it starts those processes first (`start`) and the other vCPU answers them
while the modules load. `runner.run` then takes the answer of a command line started here
(`take`), once, instead of starting it again; what nobody took is ended (`drop`).

Only read-only command lines are started here, and only their answer is shared: the caller that
takes one reads it, checks it and reports its failure exactly as if it had started it itself.
Importable alone (os only): the processes are started with os.posix_spawn, before even `subprocess`
is loaded (about 60 ms in that guest), and `Early` answers the little of Popen's interface that
`runner.run` and `drop` use (communicate, kill, returncode).
"""

from __future__ import annotations

import os

_started: dict[tuple[str, ...], object] = {}


def env() -> dict[str, str]:
    """The environment of every command rebal runs: parsers read English, C-locale number formats."""
    out = dict(os.environ)
    out["LC_ALL"] = "C"
    out.pop("LANGUAGE", None)
    return out


def start(argvs: list[list[str]]) -> None:
    """Start each read-only command line now; one that cannot start is left to its caller, who
    starts it again and reports why it could not."""
    for argv in argvs:
        key = tuple(argv)
        if key in _started:
            continue
        try:
            _started[key] = Early(argv, env())
        except OSError:
            continue


class Early:
    """A command started with os.posix_spawn: stdin /dev/null, stdout and stderr read as text (the
    locale's encoding, surrogateescape, newlines translated), as `subprocess.run(text=True)` gives
    them; no descriptor of this process but those three is left open in it."""

    def __init__(self, argv: list[str], environ: dict[str, str]) -> None:
        self.args = argv
        self.returncode: int | None = None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                       (os.POSIX_SPAWN_DUP2, err_w, 2)]
            # what subprocess's close_fds does: an inheritable descriptor this process was given
            # (by a shell, by systemd) is closed in the child (those made here are close-on-exec)
            actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable() if fd > 2]
            self.pid = os.posix_spawnp(argv[0], argv, environ, file_actions=actions)
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        self._fds = [out_r, err_r]  # still open
        self._got: dict[int, list[bytes]] = {out_r: [], err_r: []}
        self._order = (out_r, err_r)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both outputs to their end and the exit status; subprocess.TimeoutExpired after ``timeout``
        seconds (the process left running, as Popen leaves it)."""
        import select
        import time

        chunks = self._got
        poller = select.poll()
        open_fds = self._fds
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        deadline = None if timeout is None else time.monotonic() + timeout
        while open_fds:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = poller.poll(None if left is None else left * 1000)
            if not ready and left is not None and left <= 0:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
            for fd, _ev in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    open_fds.remove(fd)
                    os.close(fd)
        if self.returncode is None:
            _pid, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        out, err = (_text(b"".join(chunks[fd])) for fd in self._order)
        return out, err

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


def _text(data: bytes) -> str:
    import locale

    text = data.decode(locale.getpreferredencoding(False), "surrogateescape")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _inheritable() -> list[int]:
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            if os.get_inheritable(fd):
                out.append(fd)
        except OSError:  # (the listing's own descriptor, closed by now)
            pass
    return out


def take(argv: tuple[str, ...]):
    """The process started for exactly this command line (a subprocess.Popen), once; else None."""
    return _started.pop(argv, None) if _started else None


def drop() -> None:
    """End and reap what nobody took (a run that failed before its queries, a query it did not need)."""
    while _started:
        _, proc = _started.popitem()
        try:
            proc.kill()  # type: ignore[attr-defined]
        except OSError:
            pass
        proc.communicate()  # type: ignore[attr-defined]


def started() -> list[tuple[str, ...]]:
    """The command lines started and not yet taken (for tests and debugging)."""
    return list(_started)
