"""Pure parsers of zpool output. Text in, model objects out; no I/O.

Three shapes of `zpool list`-like output are read, chosen by what the installed ZFS supports:
- JSON: `zpool list -v -j --json-int` (OpenZFS 2.3+), exact bytes, vdev classes named;
- parsable: `zpool list -v -Hp` (OpenZFS 0.8+), exact bytes; with -H every vdev row starts with a
  single tab, so the tree is rebuilt from the figures: a top-level vdev has an ALLOC, a leaf below a
  group has "-";
- iostat: `zpool iostat -v` (zfs-fuse and other old ZFS), human units, groups named `mirror` /
  `raidz1` without their index, log vdevs printed inline. The allocation class and the unique name of
  each vdev then come from `zpool status` (see `merge_iostat_status`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from ..errors import RebalError
from .model import NORMAL, Pool, PoolStatus, StatusVdev, Vdev


class ParseError(RebalError):
    """zpool printed something rebal does not understand."""


# Section headers in `zpool list -v`, `zpool iostat -v` and `zpool status`, by allocation class.
SECTION_CLASS = {
    "logs": "log",
    "log": "log",
    "cache": "cache",
    "spare": "spare",
    "spares": "spare",
    "special": "special",
    "dedup": "dedup",
}

_UNITS = {"": 0, "B": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6, "Z": 7}
_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([BKMGTPEZ]?)$")
_GROUP = re.compile(r"^(mirror|raidz[123]?|draid[123]?(?::[^-]+)?|replacing|spare|indirect|root)(?:-(\d+))?$")


def parse_human(text: str) -> int:
    """'1.36G' -> bytes (powers of 1024, as zpool prints them). '0' -> 0."""
    m = _HUMAN.match(text.strip())
    if not m:
        raise ParseError(f"not a size: {text!r}")
    return round(float(m.group(1)) * 1024 ** _UNITS[m.group(2)])


def human_precision(value: int) -> int:
    """Half a unit of the last digit zpool shows for ``value``: how far a human figure may be off."""
    if value < 1024:
        return 0
    exp = 0
    v = float(value)
    while v >= 1024 and exp < 7:
        v /= 1024
        exp += 1
    digits = 0 if v >= 100 else 1 if v >= 10 else 2
    return int(0.5 * 10 ** (-digits) * 1024**exp) + 1


def group_type(name: str) -> str | None:
    """'mirror-0' -> 'mirror', 'raidz2' -> 'raidz2', 'draid1:2d:4c:0s-0' -> 'draid1', 'sda' -> None."""
    m = _GROUP.match(name)
    if not m:
        return None
    t = m.group(1)
    return t.split(":")[0]


def _leaf_type(name: str) -> str:
    return "file" if name.startswith("/") and not name.startswith("/dev/") else "disk"


def _section_header(line: str) -> str | None:
    """A class header row ('logs', 'cache', 'special' ... followed by dashes only), or None."""
    parts = line.split()
    if parts and parts[0] in SECTION_CLASS and all(p == "-" for p in parts[1:]):
        return SECTION_CLASS[parts[0]]
    return None


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return None if text in ("-", "") else int(text)


# --------------------------------------------------------------------------------------------
# zpool list -v -j --json-int


def _prop(props: dict, key: str) -> int:
    val = props.get(key, {}).get("value", "-")
    if isinstance(val, int):
        return val
    try:
        return int(val)
    except (TypeError, ValueError):
        return 0


def _json_vdev(name: str, v: dict, default_class: str) -> Vdev:
    props = v.get("properties", {})
    vtype = v.get("vdev_type", "disk")
    vclass = v.get("class", default_class) or default_class
    if default_class in ("cache", "spare"):
        vclass = default_class
    devices = tuple(_json_leaves(v))
    return Vdev(
        name=name,
        type=group_type(name) or vtype if vtype not in ("disk", "file") else vtype,
        size=_prop(props, "size"),
        alloc=_prop(props, "allocated"),
        free=_prop(props, "free"),
        vclass=SECTION_CLASS.get(vclass, vclass),
        state=v.get("state", props.get("health", {}).get("value", "")),
        devices=devices,
        guid=int(v["guid"]) if str(v.get("guid", "")).isdigit() else None,
    )


def _json_leaves(v: dict) -> list[str]:
    kids = v.get("vdevs") or {}
    out: list[str] = []
    for kname, kv in kids.items():
        out.extend(_json_leaves(kv) if kv.get("vdevs") else [kname])
    return out


JSON_CLASS_GROUPS = {"logs": "log", "l2cache": "cache", "spares": "spare", "special": "special", "dedup": "dedup"}


def _features(props: dict) -> tuple[tuple[str, str], ...] | None:
    """The states of the `feature@` columns asked for ("-": a feature this zpool does not know, left
    out); None where none was asked."""
    asked = [k for k in props if k.startswith("feature@")]
    if not asked:
        return None
    states = {k[len("feature@"):]: props[k].get("value") for k in asked}
    return tuple((k, v) for k, v in states.items() if v in ("enabled", "active", "disabled"))


def parse_zpool_list_json(text: str) -> list[Pool]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"zpool list -j printed invalid JSON: {e}") from None
    pools = []
    for pname, p in (doc.get("pools") or {}).items():
        props = p.get("properties", {})
        vdevs: list[Vdev] = []
        for key, default_class in (("vdevs", NORMAL), ("logs", "log"), ("l2cache", "cache"), ("spares", "spare")):
            for vname, v in (p.get(key) or {}).items():
                if key == "vdevs" and vname in JSON_CLASS_GROUPS and "vdev_type" not in v:
                    # OpenZFS 2.4 nests the other classes inside "vdevs" as groups without vdev
                    # fields: {"special": {"mirror-3": {...}}, "logs": {...}, "l2cache": ..., "spares": ...}
                    for kname, kv in v.items():
                        vdevs.append(_json_vdev(kname, kv, JSON_CLASS_GROUPS[vname]))
                    continue
                vdevs.append(_json_vdev(vname, v, default_class))
        pools.append(
            Pool(
                name=p.get("name", pname),
                size=_prop(props, "size"),
                alloc=_prop(props, "allocated"),
                free=_prop(props, "free"),
                health=props.get("health", {}).get("value", p.get("state", "")),
                vdevs=tuple(vdevs),
                source="json",
                freeing=_prop(props, "freeing") if "freeing" in props else None,
                features=_features(props),
            )
        )
    return pools


# --------------------------------------------------------------------------------------------
# zpool list -v -Hp


@dataclass
class _Group:
    name: str
    size: int
    alloc: int
    free: int
    vclass: str
    state: str
    devices: list[str] = field(default_factory=list)

    def vdev(self, exact: bool = True) -> Vdev:
        gt = group_type(self.name)
        return Vdev(
            name=self.name,
            type=gt or _leaf_type(self.name),
            size=self.size,
            alloc=self.alloc,
            free=self.free,
            vclass=self.vclass,
            state=self.state,
            devices=tuple(self.devices) if gt else (),
            exact=exact,
        )


def parse_zpool_list_hp(text: str) -> list[Pool]:
    pools: list[Pool] = []
    cur: dict | None = None
    groups: list[_Group] = []
    section = NORMAL

    def flush() -> None:
        if cur is not None:
            pools.append(Pool(**cur, vdevs=tuple(g.vdev() for g in groups), source="parsable"))

    for raw in text.splitlines():
        if not raw.strip():
            continue
        header = _section_header(raw)
        if header:
            section = header
            continue
        f = raw.split("\t")
        if not raw.startswith("\t"):  # a pool row
            flush()
            if len(f) < 10:
                raise ParseError(f"unexpected zpool list row: {raw!r}")
            cur = dict(name=f[0], size=int(f[1]), alloc=int(f[2]), free=int(f[3]), health=f[9])
            groups, section = [], NORMAL
            continue
        if cur is None or len(f) < 11:
            raise ParseError(f"unexpected zpool list row: {raw!r}")
        name, size, alloc, free, health = f[1], _int_or_none(f[2]), _int_or_none(f[3]), _int_or_none(f[4]), f[10]
        if section in ("cache", "spare") or alloc is not None or not groups:
            groups.append(_Group(name, size or 0, alloc or 0, free or 0, section, health))
        else:
            groups[-1].devices.append(name)
    flush()
    return pools


# --------------------------------------------------------------------------------------------
# zpool iostat -v (human units)


@dataclass
class IostatVdev:
    name: str
    alloc: int
    free: int
    section: str
    devices: list[str] = field(default_factory=list)


@dataclass
class IostatPool:
    name: str
    alloc: int
    free: int
    vdevs: list[IostatVdev] = field(default_factory=list)


def parse_zpool_iostat_v(text: str) -> list[IostatPool]:
    pools: list[IostatPool] = []
    section = NORMAL
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith("---") or s.startswith("capacity") or s.startswith("pool "):
            continue
        header = _section_header(raw)
        if header:
            section = header
            continue
        parts = s.split()
        if len(parts) < 3:
            raise ParseError(f"unexpected zpool iostat row: {raw!r}")
        indent = len(raw) - len(raw.lstrip(" "))
        name, alloc, free = parts[0], parts[1], parts[2]
        if indent == 0:
            pools.append(IostatPool(name, parse_human(alloc), parse_human(free)))
            section = NORMAL
            continue
        if not pools:
            raise ParseError(f"zpool iostat row before any pool: {raw!r}")
        vdevs = pools[-1].vdevs
        top = indent <= 2 or section in ("cache", "spare") or not vdevs
        if top and alloc != "-":
            vdevs.append(IostatVdev(name, parse_human(alloc), parse_human(free), section))
        elif top:  # a spare or a device with no space figures
            vdevs.append(IostatVdev(name, 0, 0, section))
        else:
            vdevs[-1].devices.append(name)
    return pools


# --------------------------------------------------------------------------------------------
# zpool status

_STATUS_KEYS = ("pool", "state", "status", "action", "see", "scan", "scrub", "expand", "remove", "config", "errors")
_KEY_LINE = re.compile(r"^\s{0,8}(" + "|".join(_STATUS_KEYS) + r"):\s?(.*)$")


def _count(text: str) -> int:
    try:
        return parse_human(text)
    except ParseError:
        return 0


def parse_zpool_status(text: str) -> list[PoolStatus]:
    """Parse `zpool status [-v]` of one or more pools (not `-x` alone)."""
    pools: list[PoolStatus] = []
    cur: PoolStatus | None = None
    key = None
    fields: dict[str, list[str]] = {}
    config: list[str] = []

    def finish() -> None:
        if cur is None:
            return
        cur.status = "\n".join(fields.get("status", [])).strip()
        cur.action = "\n".join(fields.get("action", [])).strip()
        cur.scan = "\n".join(fields.get("scan", []) + fields.get("scrub", []) + fields.get("expand", [])).strip()
        cur.errors = "\n".join(fields.get("errors", [])).strip()
        cur.vdevs = _parse_config(cur.name, config)
        pools.append(cur)

    for raw in text.splitlines():
        m = _KEY_LINE.match(raw)
        if m and not (key == "config" and raw.startswith("\t")):
            key, rest = m.group(1), m.group(2)
            if key == "pool":
                finish()
                cur, fields, config = PoolStatus(name=rest.strip(), state=""), {}, []
            elif key == "state" and cur is not None:
                cur.state = rest.strip()
            elif key != "config":
                fields.setdefault(key, []).append(rest.strip())
            continue
        if cur is None:
            continue
        if key == "config":
            config.append(raw)
        elif key and raw.strip():
            fields.setdefault(key, []).append(raw.strip())
    finish()
    return pools


def _parse_config(pool: str, lines: list[str]) -> list[StatusVdev]:
    top: list[StatusVdev] = []
    stack: list[tuple[int, StatusVdev]] = []
    section = NORMAL
    seen_header = False
    for raw in lines:
        if not raw.strip():
            continue
        body = raw.lstrip("\t")
        indent = len(body) - len(body.lstrip(" "))
        parts = body.split()
        if parts[0] == "NAME" and not seen_header:
            seen_header = True
            continue
        if indent == 0:
            if parts[0] == pool and len(parts) > 1:
                section = NORMAL
            elif parts[0] in SECTION_CLASS:
                section = SECTION_CLASS[parts[0]]
            stack = []
            continue
        state = parts[1] if len(parts) > 1 else ""
        nums = parts[2:5] if len(parts) >= 5 else []
        note = " ".join(parts[5:] if nums else parts[2:])
        row = StatusVdev(
            name=parts[0],
            state=state,
            read=_count(nums[0]) if nums else 0,
            write=_count(nums[1]) if nums else 0,
            cksum=_count(nums[2]) if nums else 0,
            section=section,
            note=note,
        )
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if stack:
            stack[-1][1].children.append(row)
        else:
            top.append(row)
        stack.append((indent, row))
    return top


# --------------------------------------------------------------------------------------------
# iostat + status -> Pool


def merge_iostat_status(io: IostatPool, st: PoolStatus | None, health: str = "") -> Pool:
    """Name and classify the vdevs of `zpool iostat -v` by the config tree of `zpool status`.

    iostat on old ZFS names groups 'mirror'/'raidz1' without the index and prints log vdevs inline;
    status has the unique name (mirror-2) and the section. A group is matched by its set of leaf
    devices, a single-disk vdev by its name; what cannot be matched is indexed by position.
    """
    candidates = list(st.vdevs) if st else []
    used: set[int] = set()
    vdevs: list[Vdev] = []
    for pos, iv in enumerate(io.vdevs):
        match = None
        for i, sv in enumerate(candidates):
            if i in used:
                continue
            if iv.devices:
                if sv.children and sorted(leaf.name for leaf in sv.leaves()) == sorted(iv.devices):
                    match = i
                    break
            elif not sv.children and sv.name == iv.name:
                match = i
                break
        gt = group_type(iv.name)
        if match is not None:
            used.add(match)
            sv = candidates[match]
            name, vclass, state = sv.name, sv.section if iv.section == NORMAL else iv.section, sv.state
        else:
            name = f"{gt}-{pos}" if gt and "-" not in iv.name else iv.name
            vclass, state = iv.section, ""
        vdevs.append(
            Vdev(
                name=name,
                type=gt or _leaf_type(iv.name),
                size=iv.alloc + iv.free,
                alloc=iv.alloc,
                free=iv.free,
                vclass=vclass,
                state=state,
                devices=tuple(iv.devices),
                exact=False,
            )
        )
    # Spares and cache devices that iostat did not print still belong in the listing.
    for i, sv in enumerate(candidates):
        if i not in used and sv.section in ("spare", "cache"):
            vdevs.append(Vdev(sv.name, _leaf_type(sv.name), 0, 0, 0, sv.section, sv.state, exact=False))
    return Pool(
        name=io.name,
        size=io.alloc + io.free,
        alloc=io.alloc,
        free=io.free,
        health=health or (st.state if st else ""),
        vdevs=tuple(vdevs),
        source="iostat",
    )


def with_health(pool: Pool, health: str) -> Pool:
    return replace(pool, health=health)
