"""What a replication asks of the other end beyond its ZFS: whether a gate (`rebal gate`, the ssh
forced command) stands there, and what it allows."""

from __future__ import annotations

import json

from ..errors import RebalError
from ..zfs.host import ZfsHost


class ReplicationError(RebalError):
    pass


def gate_info(host: ZfsHost) -> dict | None:
    """What a gate on ``host`` allows; None where there is none (a shell answers that no such
    command exists)."""
    from ..gate.check import INFO  # noqa: PLC0415

    res = host.run([INFO], check=False)
    if res.returncode != 0:
        return None
    try:
        info = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return info if isinstance(info, dict) and info.get("rebal_gate") else None
