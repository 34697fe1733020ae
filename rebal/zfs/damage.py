"""The permanent errors `zpool status -v` lists, read into what a heal needs: which dataset, which
snapshot (if any), which file or object. Pure: text in, data out.

OpenZFS prints, after "errors: Permanent errors have been detected in the following files:", one
entry a line: a path of a mounted file system (`/tank/ds/file`), a dataset's or a snapshot's path
(`tank/ds:/file`, `tank/ds@snap:/file`), an object number where no path is known
(`tank/ds:<0x21>`, `<0x3b>:<0x9>`: a dataset gone or unnamed), or `<metadata>:<0x..>` (pool
metadata, which no send stream carries)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OBJ = re.compile(r"^<0x([0-9a-fA-F]+)>$")


@dataclass(frozen=True)
class Damaged:
    entry: str  # the line as zpool status printed it
    dataset: str | None = None  # None: not known (a bare object set number), or pool metadata
    snapshot: str | None = None  # the part after @, where the error is in a snapshot
    path: str | None = None  # absolute: a mounted file system's path, or the path inside the dataset
    mounted: bool = False  # ``path`` is where the file is mounted (not a path inside the dataset)
    object: int | None = None  # where no path is known
    metadata: bool = False

    @property
    def key(self) -> str:
        """What names the file whether it is listed by its path or in a snapshot: dataset:path."""
        return f"{self.dataset}:{self.path or self.object}"


def permanent_errors(status: str) -> list[Damaged]:
    """The entries of the permanent-error list of one pool's `zpool status -v`; [] when there are none."""
    lines = status.splitlines()
    start = next((i for i, ln in enumerate(lines) if "Permanent errors have been detected" in ln), None)
    if start is None:
        return []
    out = []
    for ln in lines[start + 1:]:
        entry = ln.strip()
        if not entry:
            continue
        if not ln[:1].isspace():  # the next section (a second pool's status)
            break
        out.append(parse_entry(entry))
    return out


def parse_entry(entry: str) -> Damaged:
    if entry.startswith("/"):
        return Damaged(entry, path=entry, mounted=True)
    if entry.startswith("<metadata>"):
        return Damaged(entry, metadata=True)
    name, sep, rest = entry.partition(":")
    if not sep:
        return Damaged(entry)
    obj = _OBJ.match(rest)
    if _OBJ.match(name):  # <0x3b>:<0x9>: the object set is not known by name
        return Damaged(entry, object=int(obj.group(1), 16) if obj else None)
    ds, _, snap = name.partition("@")
    if obj:
        return Damaged(entry, ds, snap or None, object=int(obj.group(1), 16))
    return Damaged(entry, ds, snap or None, path=rest if rest.startswith("/") else "/" + rest)


def in_dataset(d: Damaged, mounts: dict[str, str]) -> Damaged:
    """A mounted path's entry resolved to its dataset (``mounts``: mount point -> dataset, the
    longest that holds the path wins) and the path inside it."""
    if not d.mounted or not d.path:
        return d
    best = max((mp for mp in mounts if d.path == mp or d.path.startswith(mp.rstrip("/") + "/")), key=len, default=None)
    if best is None:
        return d
    inner = "/" + d.path[len(best):].lstrip("/")
    return Damaged(d.entry, mounts[best], None, inner, mounted=False)
