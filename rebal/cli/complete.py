"""Shell completion of the names rebal's commands take: pools, datasets, replication jobs, the
scheduled jobs. Each asks ZFS or the config quickly and quietly: a completion never prints an
error, it offers nothing instead."""

from __future__ import annotations

BUILTIN_JOBS = ("fill", "health", "scrub", "rebalance", "metrics")


def _zfs_names(what: str) -> list[str]:
    """The pools' or the file systems' names, asked of this host's ZFS; [] where it does not answer."""
    from ..errors import RebalError
    from ..process.command import run
    from ..zfs.host import ZfsHost

    host = ZfsHost.here(lambda argv, **kw: run(argv, **(kw | {"timeout": 5})))
    try:
        return host.pool_names() if what == "pools" else list(host.filesystems())
    except RebalError:
        return []


def pools(incomplete: str) -> list[str]:
    return [n for n in _zfs_names("pools") if n and n.startswith(incomplete)]


def datasets(incomplete: str) -> list[str]:
    """File systems by name; nothing for a path (the shell then completes files)."""
    if incomplete.startswith(("/", ".")):
        return []
    return [n for n in _zfs_names("filesystems") if n and n.startswith(incomplete)]


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
