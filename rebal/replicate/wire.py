"""The other end of a replication job: ssh to its host, or this host for a local target; and that
connection begun as early as a run can begin it, so its handshake overlaps the run's own start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RebalError
from ..transport import Endpoint, Here, Ssh, Wire

if TYPE_CHECKING:
    from ..config import Config, Replicate


def endpoint(j: Replicate) -> Endpoint:
    """The other end: the backup host of a push job, the file server of a pull job."""
    host, user, port = ((j.source_host, j.source_user, j.source_port) if j.direction == "pull"
                        else (j.target_host, j.target_user, j.target_port))
    if host is None:
        raise RebalError(f"job {j.name}: no host to reach (a local target needs no ssh)")
    return Endpoint(host, user, port, j.identity_file, j.known_hosts,
                    connect_timeout=max(5, j.keepalive), alive_interval=j.keepalive, options=tuple(j.ssh_options))


def connect(j: Replicate) -> Wire:
    """The other end of a job: ssh to its host, or this host for a local target."""
    return Here() if j.local_target else Ssh(endpoint(j))


def early(cfg: Config, name: str) -> Wire | None:
    """Job ``name``'s connection, begun now: its master connects in the background while the run
    imports its parts, takes its lock and opens its record (under emulation that handshake is
    seconds, on a WAN a few round trips). None where a run must not connect first: no such job, a
    local target, a `pre_command` (it runs before anything is sent, and may wake the backup host),
    or a connection that cannot even begin (the run's own then fails in its record, and is reported).
    The run closes it however it ends (job.run_job's ``wire``)."""
    j = cfg.job(name)
    if j is None or j.local_target or j.pre_command:
        return None
    try:
        return connect(j)
    except RebalError:  # (a bad ssh option): the run connects again, and records and reports why
        return None
