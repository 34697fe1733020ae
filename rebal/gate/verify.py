"""What a gated key may ask to prove a backup: `rebal-gate-verify DATASET@SNAPSHOT`, the
snapshot under the gate's root, answers with the snapshot's inventory (every regular file's path and
size) and the sha256 of the files named on its standard input. Names, sizes and hashes leave the host,
never a file's contents; nothing is written but the read-only view a snapshot may need (a clone where
the ZFS has no `.zfs`, as `rebal verify` makes itself).

The snapshot is immutable, so what the walk found is what is hashed: a requested name is hashed only
when the walk listed it (never a path of the caller's making), opened without following a link.

Answer: NUL-separated records, `I` PATH SIZE for the inventory, then `H` PATH HEX (or `-`: not a file
of the snapshot, or unreadable) for each name asked, in the order asked.
"""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO

from .check import Policy, Refused, _snap

VERIFY = "rebal-gate-verify"
MAX_ASKED = 64 << 20  # bytes of names a caller may send


def check_verify(policy: Policy, stages: list[list[str]]) -> str:
    """The snapshot a verify request names, under the root (Refused otherwise). Pure."""
    if len(stages) != 1 or len(stages[0]) != 2 or stages[0][0] != VERIFY:
        raise Refused(f"{VERIFY} takes one snapshot (DATASET@SNAPSHOT) and nothing else")
    ds, snap = _snap(policy, stages[0][1])
    return f"{ds}@{snap}"


def _hash(root: bytes, rel: bytes) -> bytes:
    h = hashlib.sha256()
    fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest().encode()


def answer(root: bytes, asked: list[bytes]) -> bytes:
    """The records for the snapshot shown at ``root``."""
    from ..walk import regular_files

    inv = {os.path.relpath(p, root): st.st_size for p, st in regular_files(root)}
    out = [b"I\0%s\0%d\0" % (rel, size) for rel, size in sorted(inv.items())]
    for rel in asked:
        try:
            h = _hash(root, rel) if rel in inv else b"-"
        except OSError:
            h = b"-"
        out.append(b"H\0%s\0%s\0" % (rel, h))
    return b"".join(out)


def serve_verify(name: str, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Run an allowed request (``name`` from check_verify) on this host."""
    from ..errors import RebalError
    from ..zfs.host import ZfsHost
    from ..zfs.snapview import SnapView
    from ..transport import Here

    data = stdin.read(MAX_ASKED + 1)
    if len(data) > MAX_ASKED:
        raise Refused(f"{VERIFY}: more than {MAX_ASKED} bytes of names")
    asked = [r for r in data.split(b"\0") if r]
    host = ZfsHost(Here())
    ds, snap = name.split("@", 1)
    if not host.exists(name):
        raise Refused(f"{name} does not exist")
    try:
        with SnapView(host, ds, snap, "gate-verify") as view:
            stdout.write(answer(os.fsencode(view), asked))
    except RebalError as e:
        raise Refused(f"{name}: cannot be read here: {e}") from None
    stdout.flush()
    return 0


def parse_answer(text: str) -> tuple[dict[str, int], dict[str, str | None]]:
    """(inventory: path -> size, hashes: path -> hex or None) from a gate's answer."""
    parts = text.split("\0")
    inv: dict[str, int] = {}
    hashes: dict[str, str | None] = {}
    i = 0
    while i + 2 < len(parts):
        kind, rel, value = parts[i], parts[i + 1], parts[i + 2]
        if kind == "I" and value.isdigit():
            inv[rel] = int(value)
        elif kind == "H":
            hashes[rel] = value if len(value) == 64 else None
        i += 3
    return inv, hashes
