"""Shell completion of the names rebal's commands take: pools, datasets, replication jobs, the
scheduled jobs. Each asks ZFS or the config quickly and quietly: a completion never prints an
error, it offers nothing instead."""

from __future__ import annotations

BUILTIN_JOBS = ("fill", "health", "scrub", "rebalance", "metrics")


def _zfs_names(argv: list[str]) -> list[str]:
    from ..errors import RebalError
    from ..process.command import run

    try:
        res = run(argv, timeout=5, check=False)
    except RebalError:
        return []
    return res.stdout.split("\n") if res.returncode == 0 else []


def pools(incomplete: str) -> list[str]:
    from ..zfs import argv

    return [n for n in _zfs_names(argv.pool_names()) if n and n.startswith(incomplete)]


def datasets(incomplete: str) -> list[str]:
    """File systems by name; nothing for a path (the shell then completes files)."""
    if incomplete.startswith(("/", ".")):
        return []
    from ..zfs import argv

    return [n for n in _zfs_names(argv.filesystem_names()) if n and n.startswith(incomplete)]


def replication_jobs(incomplete: str) -> list[str]:
    from ..errors import RebalError
    from .io import load_config

    try:
        names = [j.name for j in load_config().replicate]
    except RebalError:
        return []
    return [n for n in names if n.startswith(incomplete)]


def jobs(incomplete: str) -> list[str]:
    return [n for n in BUILTIN_JOBS if n.startswith(incomplete)] + replication_jobs(incomplete)
