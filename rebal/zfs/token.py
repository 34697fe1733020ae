"""What a send would send, as `zfs send -nP` says it: a stream's size, and what a receive's resume
token would send (`zfs send -t TOKEN -nvP`, OpenZFS). Read by the replicator before it sends or
resumes, and by the gate before it lets a resume through."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenInfo:
    toname: str
    kind: str  # full, incremental
    size: int | None
    toguid: int | None = None  # the snapshot libzfs really sends: it looks it up by guid, not by toname


def parse_token_check(text: str) -> TokenInfo | None:
    """Output of `zfs send -t TOKEN -nvP` (OpenZFS): what the token would send."""
    toname = None
    toguid = None
    kind = None
    size = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("toname = "):
            toname = s.split("=", 1)[1].strip()
        if s.startswith("toguid = "):
            try:
                toguid = int(s.split("=", 1)[1].strip(), 0)
            except ValueError:
                toguid = None
        parts = line.split("\t")
        if parts[0] in ("full", "incremental"):
            kind = parts[0]
        if parts[0] == "size" and len(parts) > 1 and parts[1].strip().isdigit():
            size = int(parts[1])
    if toname is None:
        return None
    return TokenInfo(toname, kind or "full", size, toguid)


def parse_send_size(text: str) -> int | None:
    """The `size` line of `zfs send -nP` / `-nvP` output."""
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "size" and len(parts) > 1 and parts[1].strip().isdigit():
            return int(parts[1])
    return None
