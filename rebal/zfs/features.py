"""Which of the ZFS features rebal uses this host's zfs has, and what rebal does without each one.

rebal's package asks for OpenZFS 2.2 (corrective receive: `rebal heal`); it runs on less (zfs-fuse
in its own tests) and does without what is missing, as said here. Tested: OpenZFS 2.4.4 and
zfs-fuse 0.7.2. Pure: the caller asks the host."""

from __future__ import annotations

from dataclasses import dataclass

from .abilities import Abilities

MINIMUM = (2, 2)  # what the .deb's Depends says: every command works from it on


@dataclass(frozen=True)
class Feature:
    name: str
    since: str  # the OpenZFS version that brought it
    have: bool
    without: str  # what rebal does where it is missing


def features(version: tuple[int, ...], ab: Abilities, rewrite: tuple[bool, bool]) -> list[Feature]:
    """Each feature rebal's paths use, whether this zfs has it (from its usage texts where they say
    it, its version where they do not), and what rebal does without it."""
    return [
        Feature("corrective receive (zfs receive -c)", "2.2", ab.corrective,
                "`rebal heal` cannot repair blocks from the backup: restore the damaged files instead"),
        Feature("zfs rewrite", "2.3.4", rewrite[0],
                "rebalance copies and renames each file (method copy)"),
        Feature("zfs rewrite -P", "2.4.0", rewrite[1],
                "a rewrite gives the blocks new birth times: the next incremental sends them all again"),
        Feature("JSON listings (zpool list -j)", "2.3", version >= (2, 3),
                "pools are read from the text listing (the same numbers)"),
        Feature("resumable streams (receive -s, send -t)", "0.7", ab.resumable,
                "a cut send starts again from its beginning"),
        Feature("raw sends (send -w)", "0.8", ab.raw,
                "a job with raw = true sends encrypted datasets decrypted (its runs say so)"),
        Feature("receive -x", "0.7", ab.receive_x,
                "the gate receives with -u and takes back the stream's mount properties after it"),
    ]


def shown(version: tuple[int, ...]) -> str:
    if not version:
        return "zfs without `zfs version` (zfs-fuse, or ZFS before OpenZFS 0.8)"
    return "OpenZFS " + ".".join(str(v) for v in version)


def summary(version: tuple[int, ...], found: list[Feature]) -> list[str]:
    """What `rebal config check` says of this host's zfs: one line, then one per missing feature."""
    missing = [f for f in found if not f.have]
    below = bool(version) and version < MINIMUM
    head = f"zfs on this host: {shown(version)}"
    if not missing:
        return [head + ": every feature rebal uses"]
    lines = [head + (f" (below {'.'.join(map(str, MINIMUM))}, the version rebal's package asks for)"
                     if below else "") + f": {len(missing)} feature(s) missing"]
    return lines + [f"  no {f.name} (OpenZFS {f.since}+): {f.without}" for f in missing]
