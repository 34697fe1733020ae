"""ssh to the backup host: one place that builds ssh command lines.

BatchMode (never a prompt), strict host key checking against the job's known_hosts (an unknown or
changed key fails, it is never accepted silently), keepalives so a cut network is noticed, and one
ControlMaster connection per run in a private directory. Remote commands are argument lists joined
with shlex, so no value is ever interpreted by the remote shell.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass

from . import names
from .errors import CommandFailed, RebalError
from .process.command import Result, Runner, end, run, spawn


class TransportError(RebalError):
    """The backup host cannot be reached or refused us. Retryable unless it is a host key problem."""

    exit_code = 6
    retryable = True


class HostKeyError(TransportError):
    retryable = False


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    user: str = "root"
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
    connect_timeout: int = 10
    alive_interval: int = 10  # seconds between keepalives; a dead link is noticed after 3 misses
    options: tuple[str, ...] = ()  # the job's ssh_options, Key=Value (names.ssh_option_problem)

    def __post_init__(self) -> None:
        names.host(self.host)
        for o in self.options:
            if (problem := names.ssh_option_problem(o)):
                raise RebalError(f"ssh option {o!r}: {problem}")

    @property
    def multiplex(self) -> bool:
        """One master connection per run, unless the job says ControlMaster=no."""
        return not any(o.lower() == "controlmaster=no" for o in self.options)


def remote_command(*parts: list[str]) -> str:
    """A command line for the remote shell: each part quoted argument by argument, parts piped."""
    return " | ".join(shlex.join(p) for p in parts)


class Ssh:
    """ssh to one host. With ``multiplex`` (the default) one master connection, started at once in
    the background (connecting overlaps the local work before the first remote command), carries
    every command of the run; closing it is killing that process, not another round trip. If the
    master cannot connect, each command connects on its own and reports why."""

    local = False  # the other end is another host

    def __init__(self, ep: Endpoint, multiplex: bool = True) -> None:
        self.ep = ep
        multiplex = multiplex and ep.multiplex
        self._dir = tempfile.mkdtemp(prefix="rebal-ssh-") if multiplex else None
        self.commands = 0  # remote commands run (each a round trip): reported per run
        self.runs = 0  # of which through run() (the runner counts those as its own too)
        self._count = threading.Lock()  # (parallel sends and listings count from several threads)
        self._master = None  # the master connection's process
        self._ready = False
        if self._dir:
            sweep_masters()
            # the master ends with rebal: a parent-death signal (setpriv sets it, then becomes ssh),
            # so a rebal killed outside systemd (kill -9, the OOM killer) leaves no connection open;
            # where setpriv is missing, the next rebal's sweep_masters ends it
            pdeath = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []
            self._master = spawn([*pdeath, "ssh", *self._base(), "-M", "-N", "-o", "ControlPersist=no", "-o",
                                  f"ControlPath={self._sock}", "--", ep.host])
            with open(os.path.join(self._dir, OWNER), "w") as f:
                f.write(f"{os.getpid()} {_started(os.getpid())} {self._master.pid} {_started(self._master.pid)}\n")

    @property
    def _sock(self) -> str:
        return f"{self._dir}/m"

    def _wait_master(self) -> None:
        """Wait (bounded by the connect timeout) until the master accepts commands, or has failed."""
        if self._ready or self._master is None:
            return
        import time

        deadline = time.monotonic() + self.ep.connect_timeout + 5
        while not os.path.exists(self._sock) and self._master.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the socket appears once the master is connected and authenticated
        self._ready = True

    def options(self) -> list[str]:
        o = self._base()
        if self._dir:
            o += ["-o", "ControlMaster=no", "-o", f"ControlPath={self._sock}"]
        return o

    def _base(self) -> list[str]:
        ep = self.ep
        o = [
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={ep.connect_timeout}",
            "-o", f"ServerAliveInterval={ep.alive_interval}",
            "-o", "ServerAliveCountMax=3",
            "-o", "LogLevel=ERROR",
            "-p", str(ep.port),
            "-l", ep.user,
        ]
        if ep.known_hosts:
            o += ["-o", f"UserKnownHostsFile={ep.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        if ep.identity_file:
            o += ["-i", ep.identity_file, "-o", "IdentitiesOnly=yes"]
        for opt in ep.options:
            if not opt.lower().startswith("controlmaster="):  # rebal runs its own (or none)
                o += ["-o", opt]
        return o

    def argv(self, *parts: list[str]) -> list[str]:
        """ssh command line running ``parts`` (piped) on the backup host."""
        with self._count:
            self.commands += 1
        self._wait_master()
        return ["ssh", *self.options(), "--", self.ep.host, remote_command(*parts)]

    def shell_for_rsync(self) -> str:
        """The ssh command for rsync's -e (rsync splits it like a shell would)."""
        self._wait_master()
        return shlex.join(["ssh", *self.options()])

    def rsync_remote(self) -> list[str]:
        """rsync's options to reach the other end."""
        return ["-e", self.shell_for_rsync()]

    def rsync_path(self, path: str) -> str:
        """A path on the other end as rsync names it."""
        return f"{self.ep.user}@{self.ep.host}:{path}"

    @property
    def where(self) -> str:
        return self.ep.host

    def run(self, *parts: list[str], readonly: bool = True, dry_run: bool = False, check: bool = True,
            timeout: float | None = 300, input: str | bytes | None = None, stop: threading.Event | None = None,
            on_out: Callable[[bytes], None] | None = None) -> Result:
        with self._count:
            self.runs += 1
        try:
            res = run(self.argv(*parts), readonly=readonly, dry_run=dry_run, check=False, timeout=timeout, input=input,
                      stop=stop, on_out=on_out)
        except CommandFailed as e:  # a timeout
            raise TransportError(f"{self.ep.host}: {e}") from None
        if res.returncode == 255:
            raise classify_ssh(self.ep, res.stderr)
        if check and res.returncode != 0:
            raise CommandFailed(res.argv[-2:], res.returncode, res.stderr)
        return res

    def close(self) -> None:
        if self._master is not None:
            end(self._master)
            self._master = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> Ssh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


OWNER = "owner"  # in each master's directory: "<rebal pid> <its start> <master pid> <its start>"


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none: a pid and
    its start time name one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def sweep_masters(tmpdir: str | None = None) -> list[int]:
    """End the ssh master connections of rebal processes that died without closing them, and
    remove their directories. Returns the pids of the masters ended."""
    ended = []
    for d in glob.glob(os.path.join(tmpdir or tempfile.gettempdir(), "rebal-ssh-*")):
        try:
            if os.stat(d).st_uid != os.getuid():
                continue
            with open(os.path.join(d, OWNER)) as f:
                owner_s, owner_start, master_s, master_start = f.read().split()
            owner, master = int(owner_s), int(master_s)
        except (OSError, ValueError):
            continue  # a master being started by a live rebal, or not rebal's
        if _started(owner) == owner_start:
            continue  # its rebal is alive
        if _started(master) == master_start:
            try:
                os.kill(master, signal.SIGTERM)
                ended.append(master)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)
    return ended


def classify_ssh(ep: Endpoint, stderr: str) -> TransportError:
    err = stderr.strip()
    low = err.lower()
    where = f"{ep.user}@{ep.host}:{ep.port}"
    if "host key verification failed" in low or "remote host identification has changed" in low:
        kh = ep.known_hosts or "~/.ssh/known_hosts"
        return HostKeyError(
            f"{where}: the host key is unknown or has changed. rebal never accepts a host key by itself: "
            f"check the key out of band and add it to {kh} (ssh-keyscan -p {ep.port} {ep.host})"
        )
    if "permission denied" in low:
        return HostKeyError(f"{where}: login refused (key not authorised for {ep.user}?): {err.splitlines()[-1]}")
    last = err.splitlines()[-1] if err else "ssh failed"
    if "kex_exchange_identification" in low or re.search(r"connection (closed|reset) by \S+ port \d+", low):
        return TransportError(
            f"{where}: the backup host's sshd hung up before the login ({last}): it may be at its MaxStartups, "
            "or shutting this address out for a while (OpenSSH 9.8 and later: PerSourcePenalties, after "
            "logins that failed or were given up; its log says \"penalty\"; PerSourcePenaltyExemptList "
            "exempts the file server)")
    return TransportError(f"{where}: cannot reach the backup host: {last}")


class Here:
    """The other end is this host (a job without target_host: a second pool, an external disk):
    the same interface as Ssh, each command run here, no connection."""

    local = True
    where = "this host"

    def __init__(self, runner: Runner | None = None) -> None:
        """``runner``: how a command runs here (process.command.run, or a run's counting runner)."""
        self.ep = Endpoint("localhost")
        self.commands = 0
        self.runs = 0
        self._runner = runner

    def argv(self, *parts: list[str]) -> list[str]:
        if len(parts) != 1:
            raise RebalError("a local target takes one command, not a pipeline")  # rebal pipes nothing here
        return list(parts[0])

    def run(self, *parts: list[str], readonly: bool = True, dry_run: bool = False, check: bool = True,
            timeout: float | None = 300, input: str | bytes | None = None, stop: threading.Event | None = None,
            on_out: Callable[[bytes], None] | None = None) -> Result:
        if self._runner is not None:  # (a test's recorded answers take only what was given)
            extra: dict[str, object] = {k: v for k, v in (("input", input), ("stop", stop), ("on_out", on_out))
                                        if v is not None}
            return self._runner(self.argv(*parts), readonly=readonly, check=check, timeout=timeout,
                                **extra, **({"dry_run": True} if dry_run else {}))
        return run(self.argv(*parts), readonly=readonly, dry_run=dry_run, check=check, timeout=timeout, input=input,
                   stop=stop, on_out=on_out)

    def rsync_remote(self) -> list[str]:
        return []

    def rsync_path(self, path: str) -> str:
        return path

    def close(self) -> None:
        pass

    def __enter__(self) -> Here:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


Wire = Ssh | Here  # how a job reaches its other end: ssh, or this host for a local target
