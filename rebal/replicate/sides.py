"""The two sides of a job as ZFS hosts, whichever end rebal runs on."""

from __future__ import annotations

from ..config import Replicate
from ..zfs.host import ZfsHost
from .transport import Here, Ssh


def job_hosts(j: Replicate, link: Ssh | Here) -> tuple[ZfsHost, ZfsHost]:
    """(the source's host, the backup's host) of a job. ``link`` reaches the other end: the backup
    host for a push job, the source host for a pull job (which runs on the backup host); a job with
    a local target has both here."""
    here = ZfsHost(Here())
    if link.local:
        return here, here
    there = ZfsHost(link)
    return (there, here) if j.direction == "pull" else (here, there)
