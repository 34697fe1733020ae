"""Where a file's blocks really are: every block pointer names its vdev (`DVA <vdev:offset:asize>`),
and `zdb -ddddd POOL/DATASET OBJECT...` prints them for each object (an object id is the file's
inode number). These are pure parsers of zdb's text, and the reader that runs zdb in batches.

zdb reads the pool from its disks while it is imported: what was written in the last seconds shows
once the pool has synced (the caller settles the pool first)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

_OBJ_HEAD = re.compile(r"^\s+Object\s+lvl\s+iblk")
# the row under the header: object id and its dblk (OpenZFS adds a dnsize column that zfs-fuse lacks)
_OBJ_ROW = re.compile(r"^\s+(\d+)\s+\d+\s+\S+\s+(\S+)\s+\S+")
_BLOCK = re.compile(r"^\s*([0-9a-f]+)\s+L(\d+)\s+(.*)$")
_DVA = re.compile(r"(?<![\w:])(\d+):([0-9a-f]+):([0-9a-f]+)(?![\w:])")
_CHILD = re.compile(r"^(\s*)children\[(\d+)\]:\s*$")
_KV = re.compile(r"^\s*(\w+):\s*'?(.*?)'?\s*$")


def object_blocks(text: str) -> Iterator[tuple[int, str, int | None, int, str | None]]:
    """The objects of `zdb -ddddd DS OBJ...` (with -bbbbbb or not) and every block pointer of each:
    (object id, its dblk as zdb prints it, None, -1, None) once per object, then (id, dblk, offset,
    level, the rest of the line) for each block line (L0: data; L1 and up: indirect, metadata)."""
    cur: tuple[int, str] | None = None
    expect_row = in_blocks = False
    for line in text.splitlines():
        if _OBJ_HEAD.match(line):
            expect_row, in_blocks, cur = True, False, None
            continue
        if expect_row:
            m = _OBJ_ROW.match(line)
            if m:
                cur = (int(m.group(1)), m.group(2))
                expect_row = False
                yield cur[0], cur[1], None, -1, None
            continue
        if line.strip().startswith("Indirect blocks:"):
            in_blocks = True
            continue
        if in_blocks and cur is not None:
            m = _BLOCK.match(line)
            if m:  # (segment lines, blank lines: no match)
                yield cur[0], cur[1], int(m.group(1), 16), int(m.group(2)), m.group(3)


def data_blocks(text: str) -> Iterator[tuple[int, str, int | None, str | None]]:
    """The objects of `zdb -ddddd DS OBJ...` (with -bbbbbb or not) and their data blocks: (object id,
    its dblk as zdb prints it, None, None) once per object, then (id, dblk, offset, the rest of the
    line) for each L0 line (indirect blocks are metadata, not the file's data)."""
    for obj, dblk, offset, level, rest in object_blocks(text):
        if level <= 0:
            yield obj, dblk, offset, rest


def parse_objects(text: str) -> dict[int, Counter]:
    """`zdb -ddddd DS OBJ...` -> object id -> Counter(top-level vdev id -> allocated bytes of its
    data blocks, L0, every copy). A file whose data is embedded in its block pointer has none."""
    out: dict[int, Counter] = {}
    for obj, _dblk, _offset, rest in data_blocks(text):
        c = out.setdefault(obj, Counter())
        if rest is None or "EMBEDDED" in rest or "HOLE" in rest.upper().split(" ")[0]:
            continue
        for tok in rest.split():
            d = _DVA.fullmatch(tok)
            if d is None:
                break  # the DVAs come first, then sizes, fill, birth, checksum
            c[int(d.group(1))] += int(d.group(3), 16)
    return out


@dataclass(frozen=True, slots=True)
class TopVdev:
    id: int
    type: str  # mirror, raidz, file, disk, ...
    path: str  # a leaf's path ("" for a group)
    nparity: int
    is_log: bool
    bias: str  # "special", "dedup" or ""
    ashift: int = 0
    width: int = 1  # its children (the disks of a raidz or a mirror; 1 for a lone disk)
    leaves: tuple[str, ...] = ()  # the paths of its disks (its own path for a lone disk)
    guid: int = 0


def parse_config(text: str) -> list[TopVdev]:
    """`zdb -C POOL`: the top-level vdevs (children of the root vdev) in id order."""
    tops: list[TopVdev] = []
    root_indent: int | None = None
    cur: dict | None = None
    cur_indent = 0
    for line in text.splitlines():
        m = _CHILD.match(line)
        if m:
            indent = len(m.group(1))
            if root_indent is None:
                root_indent = indent
            if indent == root_indent:
                if cur is not None:
                    tops.append(_top(cur))
                cur, cur_indent = {"id": int(m.group(2)), "width": 0}, indent
            elif cur is not None and indent == cur_indent + 4:
                cur["width"] += 1
            continue
        if cur is None:
            continue
        stripped_indent = len(line) - len(line.lstrip())
        if stripped_indent <= cur_indent:  # left the children block
            tops.append(_top(cur))
            cur = None
            continue
        kv = _KV.match(line)
        if stripped_indent == cur_indent + 4:
            if kv and kv.group(1) not in cur:
                cur[kv.group(1)] = kv.group(2)
        if kv and kv.group(1) == "path":  # a disk's, at any depth below the top-level vdev
            cur.setdefault("leaves", []).append(kv.group(2))
    if cur is not None:
        tops.append(_top(cur))
    return sorted(tops, key=lambda t: t.id)


def _top(d: dict) -> TopVdev:
    return TopVdev(int(d.get("id", d["id"])), d.get("type", "?"), d.get("path", ""), int(d.get("nparity", 0) or 0),
                   d.get("is_log", "0") == "1", d.get("alloc_bias", d.get("vdev_alloc_bias", "")),
                   int(d.get("ashift", 0) or 0), d.get("width") or 1, tuple(d.get("leaves", ())),
                   int(d["guid"]) if str(d.get("guid", "")).isdigit() else 0)


def data_vdev_ids(tops: list[TopVdev], data_guids: set[int] | None = None) -> list[int]:
    """The ids of the normal data vdevs, in order (log, special and dedup vdevs left out). A special
    or dedup vdev's class is not in `zdb -C`'s config (it lives in the vdev's ZAP): where zpool gave
    the data vdevs' guids (``data_guids``), they decide; else only log vdevs and holes are told apart."""
    if data_guids:
        return [t.id for t in tops if t.guid in data_guids]
    return [t.id for t in tops if not t.is_log and not t.bias and t.type not in ("hole", "missing")]


def name_map(tops: list[TopVdev], data_names: list[str], data_guids: list[int | None] | None = None) -> dict[int, str]:
    """vdev id -> the name `rebal status` gives it: the data vdevs match by guid where zpool gave them,
    else in order; any other id gets `vdev-<id>` (its bytes are not counted among the data vdevs)."""
    guids = [g for g in data_guids or [] if g]
    out = {t.id: f"vdev-{t.id}" for t in tops}
    if guids and len(guids) == len(data_names):
        by_guid = dict(zip(guids, data_names))
        out.update({t.id: by_guid[t.guid] for t in tops if t.guid in by_guid})
        return out
    ids = data_vdev_ids(tops)
    if len(ids) == len(data_names):
        out.update(dict(zip(ids, data_names)))
    return out
