"""What the shipped systemd units need to be told: the paths a scheduled run writes.

The units run rebal with `ProtectSystem=strict`: the whole file system is read-only to it except
`ReadWritePaths`. A scheduled rebalance rewrites files under its targets, so their mount points must
be listed there, in both units (the daemon's `rebal.service` and the timer's `rebal-due.service`).
`drop_ins()` says what to write; the `rebal units` command writes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config
    from .zfs.host import ZfsHost

UNITS = ("rebal.service", "rebal-due.service")
DROP_IN = "50-rebal-paths.conf"


@dataclass
class DropIn:
    unit: str
    path: str  # where the file goes
    text: str


def writable_paths(cfg: Config, host: ZfsHost) -> list[str]:
    """The state directory, every rebalance and refresh target's directory (a dataset's mount point) and, where
    the metrics schedule writes, the metrics file's directory ("-" before it: a unit still starts
    while it does not exist, e.g. before node_exporter is installed)."""
    from . import names

    paths = [os.path.dirname(os.path.abspath(cfg.state_db))]
    optional = []
    if cfg.schedule.metrics:
        optional.append(os.path.dirname(os.path.abspath(cfg.metrics_file)))
    for spec in [*cfg.rebalance.targets, *cfg.refresh.targets]:
        if spec.startswith("/"):
            paths.append(os.path.normpath(spec))
        else:
            names.dataset(spec)
            paths.append(host.mounted_at(spec))
    out: list[str] = []
    for p in sorted(set(paths) | set(optional), key=len):  # a path under another listed one adds nothing
        if not any(p == q.lstrip("-") or p.startswith(q.lstrip("-").rstrip("/") + "/") for q in out):
            out.append(p if p in paths else f"-{p}")
    return out


def drop_ins(cfg: Config, host: ZfsHost, unit_dir: str, source: str) -> list[DropIn]:
    paths = writable_paths(cfg, host)
    for p in paths:
        if any(c.isspace() for c in p) or '"' in p:
            from .errors import UsageError

            raise UsageError(f"{p}: a path with spaces or quotes cannot go into ReadWritePaths as it is; "
                             "give the rebalance a target without them")
    text = (f"# Written by `rebal units` from {source}: the paths rebal writes (its state, the\n"
            "# [rebalance] and [refresh] targets, the metrics file's directory). The unit's ProtectSystem=strict makes\n"
            "# everything else read-only.\n"
            "# Run `rebal units` again after changing the targets.\n"
            "[Service]\n"
            f"ReadWritePaths={' '.join(paths)}\n")
    return [DropIn(u, os.path.join(unit_dir, f"{u}.d", DROP_IN), text) for u in UNITS]


def write(d: DropIn) -> bool:
    """Write a drop-in (atomically); False when it already says the same."""
    try:
        with open(d.path) as f:
            if f.read() == d.text:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(d.path), mode=0o755, exist_ok=True)
    tmp = d.path + ".tmp"
    with open(tmp, "w") as f:
        f.write(d.text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, d.path)
    return True
