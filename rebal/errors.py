"""Typed errors. Library code raises these; only the CLI turns them into output and exit codes."""

from __future__ import annotations

from collections.abc import Sequence


class RebalError(Exception):
    """An error a user can act on. `str(err)` is one line fit to print."""

    exit_code = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(RebalError):
    """The configuration file is unreadable or invalid. Carries one line per problem."""

    exit_code = 2

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(f"{path}: {p}" for p in problems))


class UsageError(RebalError):
    """Bad input on the command line (a name that is not valid, a value out of range)."""

    exit_code = 2


class CannotWrite(RebalError):
    """A file rebal must write cannot be written (a read-only file system, a missing directory, a
    full disk): the message names the path and what to do."""

    @classmethod
    def of(cls, what: str, path: str, e: OSError) -> CannotWrite:
        import errno

        hint = {
            errno.EROFS: "it is read-only to rebal: under the shipped systemd units (ProtectSystem=strict) "
                         "run `rebal units` so the directory is in ReadWritePaths, then `systemctl daemon-reload`",
            errno.ENOENT: "its directory does not exist: create it, or name another place in the config",
            errno.EACCES: "permission denied: run rebal as root, or name a place it may write",
            errno.ENOSPC: "the file system is full",
        }.get(e.errno or 0, "")
        return cls(f"cannot write {what} {path}: {e.strerror}" + (f" ({hint})" if hint else ""))


class ToolMissing(RebalError):
    """A required external program (zpool, zfs, rsync, ssh) is not installed."""

    exit_code = 3


class ZfsUnavailable(RebalError):
    """ZFS is installed but does not answer (zfs-fuse daemon down, no kernel module)."""

    exit_code = 3


class PermissionDenied(RebalError):
    exit_code = 4


class NoSuchPool(RebalError):
    exit_code = 5


class CommandFailed(RebalError):
    """An external command exited non-zero. Keeps argv, exit status and stderr for callers."""

    def __init__(self, argv: Sequence[str | bytes], returncode: int, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        first = stderr.strip().splitlines()[0] if stderr.strip() else f"exit status {returncode}"
        # (runner.run may hand file names on as bytes: the message says them as text)
        super().__init__(f"{_text(argv[0])} {' '.join(_text(a) for a in argv[1:3])}: {first}")


def _text(arg: str | bytes) -> str:
    return arg.decode("utf-8", "surrogateescape") if isinstance(arg, bytes) else str(arg)


class UnsupportedOption(CommandFailed):
    """The installed tool does not know an option we tried (an older ZFS): try another way."""


class StateError(RebalError):
    """The SQLite state database cannot be opened or is from a newer rebal."""

    exit_code = 4


class HostError(RebalError):
    """A zfs or zpool command on a host (this one, or the other end of a job) failed."""
