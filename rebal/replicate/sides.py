"""The two sides of a job as ZFS hosts, whichever end rebal runs on."""

from __future__ import annotations

from ..config import Replicate
from ..zfs.host import ZfsHost
from ..transport import Here, Wire


def job_hosts(j: Replicate, link: Wire) -> tuple[ZfsHost, ZfsHost]:
    """(the source's host, the backup's host) of a job. ``link`` reaches the other end: the backup
    host for a push job, the source host for a pull job (which runs on the backup host); a job with
    a local target has both here."""
    here = ZfsHost(Here())
    if link.local:
        return here, here
    there = ZfsHost(link)
    return (there, here) if j.direction == "pull" else (here, there)


def backup_link(j: Replicate, link: Wire) -> Wire:
    """How the backup's host is reached: ``link`` for a push job (or a local target), this host for
    a pull job (it runs on the backup host)."""
    if link.local or j.direction != "pull":
        return link
    return Here()
