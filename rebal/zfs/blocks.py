"""What each data block of a file was written with: `zdb -ddddd -bbbbbb DS OBJ...` prints every block
pointer in full (`DVA[0]=<vdev:offset:asize> ... [L0 ZFS plain file] fletcher4 lz4 unencrypted LE
contiguous unique single size=20000L/2000P birth=9L/9P fill=1 cksum=...`): its compression, checksum,
copies (DVAs), dedup flag, logical and physical size and birth txg; and each object's data block size
(`dblk` in the object's row). Pure parsers of zdb's text (OpenZFS 2.x and zfs-fuse alike); the
fixtures under tests/fixtures/ are recorded output.

A dataset's properties map to the names a block pointer shows (`expected_compression`,
`expected_checksum`): compression=on is lz4 where the pool has the lz4 feature (lzjb before it),
gzip is gzip-6, and a zstd block does not show its level (zstd-19 and zstd match as zstd)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .placement import data_blocks

_DVA = re.compile(r"DVA\[\d+\]=<(\d+):([0-9a-f]+):([0-9a-f]+)>")
_KIND = re.compile(r"\[L\d+ [^\]]*\]\s+(.*)$")
_SIZE = re.compile(r"size=([0-9a-f]+)L/([0-9a-f]+)P")
_BIRTH = re.compile(r"birth=(\d+)L")
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@dataclass(frozen=True, slots=True)
class Block:
    offset: int  # in the file
    lsize: int
    psize: int
    asize: int  # allocated, every copy (what the pool spends on it)
    copies: int  # DVAs
    compression: str  # as zdb names it: uncompressed, lz4, zstd, gzip-6, lzjb, zle, ...
    checksum: str  # fletcher4, sha256, blake3, ...
    dedup: bool
    birth: int  # logical birth txg
    dvas: tuple = ()  # (top-level vdev id, allocated bytes) of each copy


@dataclass
class ObjectBlocks:
    obj: int
    dblk: int  # the data block size of the object (its record size when it has more than one block)
    blocks: list[Block] = field(default_factory=list)
    embedded: int = 0  # blocks whose data lives in the pointer itself (no properties to refresh)


def size_of(text: str) -> int:
    """zdb's short sizes: 512, 128K, 1M, 1.50K."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)", text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNIT[m.group(2)])


def parse_block(offset: int, text: str) -> Block | None:
    """One L0 pointer in the full form; None for a hole, an embedded block or a compact form."""
    if "EMBEDDED" in text or "HOLE" in text:
        return None
    dvas = _DVA.findall(text)
    kind = _KIND.search(text)
    size = _SIZE.search(text)
    if not dvas or not kind or not size:
        return None
    words = kind.group(1).split()
    if len(words) < 2:
        return None
    checksum, compression = words[0], words[1]
    birth = _BIRTH.search(text)
    return Block(offset, int(size.group(1), 16), int(size.group(2), 16), sum(int(d[2], 16) for d in dvas),
                 len(dvas), compression, checksum, " dedup " in f" {kind.group(1)} ", int(birth.group(1)) if birth else 0,
                 tuple((int(d[0]), int(d[2], 16)) for d in dvas))


def parse_objects(text: str) -> dict[int, ObjectBlocks]:
    """`zdb -ddddd -bbbbbb DS OBJ...` -> object id -> its data blocks (L0)."""
    out: dict[int, ObjectBlocks] = {}
    for obj, dblk, offset, rest in data_blocks(text):
        ob = out.setdefault(obj, ObjectBlocks(obj, size_of(dblk)))
        if rest is None or offset is None:
            continue
        b = parse_block(offset, rest)
        if b is not None:
            ob.blocks.append(b)
        elif "EMBEDDED" in rest:
            ob.embedded += 1
    return out


def expected_compression(value: str, lz4: bool = True) -> str:
    """The compression a block written now gets under the property ``value``."""
    v = value.lower()
    if v in ("off", "none"):
        return "uncompressed"
    if v == "on":
        return "lz4" if lz4 else "lzjb"
    if v == "gzip":
        return "gzip-6"
    if v.startswith("zstd"):
        return "zstd"
    return v


def expected_checksum(value: str, dedup: str = "off") -> str:
    """The checksum a data block written now gets (dedup with checksum=on means sha256)."""
    v = value.lower()
    d = dedup.lower()
    if d not in ("off", "-", ""):
        algo = d.split(",")[0]
        if algo in ("on", "verify"):
            return "sha256" if v in ("on", "fletcher4", "fletcher2") else v
        return algo
    return "fletcher4" if v == "on" else v
