"""The full block pointers of zdb (zfs/blocks.py) and what oldblocks.py makes of them, on real
recorded output: zfs-fuse's (tests/fixtures/zfs-fuse/zfsfuse_refresh_*) and OpenZFS 2.4's
(tests/fixtures/openzfs/refresh_*)."""

from collections import Counter
from pathlib import Path

import pytest

from rebal.oldblocks import Wanted, block_reasons, compressible, record_stale, zstd_level
from rebal.zfs.blocks import expected_checksum, expected_compression, parse_objects, size_of

FX = Path(__file__).resolve().parents[1] / "fixtures"


def test_zfs_fuse_blocks_say_compression_copies_size_and_birth():
    objs = parse_objects((FX / "zfs-fuse" / "zfsfuse_refresh_zdb-ddddd-bbbbbb.txt").read_text())
    assert sorted(objs) == [5, 6, 7]
    plain, gz2, tiny = objs[5], objs[6], objs[7]
    assert plain.dblk == 128 << 10 and len(plain.blocks) == 3
    assert {(b.compression, b.copies, b.lsize, b.psize, b.birth) for b in plain.blocks} == {("uncompressed", 1, 0x20000, 0x20000, 98)}
    assert [b.offset for b in plain.blocks] == [0, 0x20000, 0x40000]
    assert {(b.compression, b.checksum, b.copies, b.asize, b.dedup) for b in gz2.blocks} == {("gzip-6", "fletcher4", 2, 0x2000, False)}
    assert tiny.dblk == 512 and [(b.compression, b.copies) for b in tiny.blocks] == [("uncompressed", 2)]


def test_what_is_old_under_the_datasets_properties_now():
    objs = parse_objects((FX / "zfs-fuse" / "zfsfuse_refresh_zdb-ddddd-bbbbbb.txt").read_text())
    now = Wanted(expected_compression("gzip"), expected_checksum("on"), 2, False, 128 << 10)
    text = (b"hello world " * 20000)[:0x20000]
    assert block_reasons(objs[5].blocks[0], now, lambda: text) == {"compression", "copies"}
    assert block_reasons(objs[5].blocks[0], now) == {"compression", "copies"}  # no data asked: counted
    assert all(block_reasons(b, now) == set() for b in objs[6].blocks)
    # a 3-byte block stored uncompressed is what a write now makes of it too: not old
    assert block_reasons(objs[7].blocks[0], now, lambda: b"abc") == set()
    assert not any(record_stale(o, now) for o in objs.values())
    bigger = Wanted("gzip-6", "fletcher4", 2, False, 1 << 20)
    assert [record_stale(objs[i], bigger) for i in (5, 6, 7)] == [True, True, False]


def test_property_values_map_to_what_a_block_shows():
    assert expected_compression("on", lz4=True) == "lz4" and expected_compression("on", lz4=False) == "lzjb"
    assert expected_compression("off") == "uncompressed" and expected_compression("gzip") == "gzip-6"
    assert expected_compression("zstd-19") == "zstd" and expected_compression("gzip-9") == "gzip-9"
    assert expected_checksum("on") == "fletcher4" and expected_checksum("on", "on") == "sha256"
    assert expected_checksum("blake3", "verify") == "blake3" and expected_checksum("sha512") == "sha512"
    assert zstd_level("zstd") == ["-3"] and zstd_level("zstd-12") == ["-12"] and zstd_level("zstd-fast-5") == ["--fast=5"]


def test_compressible_is_the_eighth_zfs_asks():
    import os

    assert compressible(b"abc" * 40000) and not compressible(os.urandom(1 << 17))


def test_a_block_that_cannot_save_a_sector_is_not_compressible():
    """ZFS stores a block uncompressed when its compressed size, rounded up to the pool's smallest
    allocation, is not smaller: a 2 KiB block of text at ashift 12 stays uncompressed however often
    it is rewritten, so it must never count as old."""
    import random

    rnd = random.Random(1)
    words = [b"pool", b"vdev", b"scrub", b"snapshot", b"error", b"bytes", b"seconds"]
    text = b" ".join(b"%s=%d" % (rnd.choice(words), rnd.randrange(10**6)) for _ in range(300))[:2000]
    assert compressible(text, 2048, min_alloc=512)  # ashift 9: 2 KiB -> 1 KiB saves two sectors
    assert not compressible(text, 2048, min_alloc=4096)  # ashift 12: one sector either way
    big = (text * 66)[:131072]
    assert compressible(big, 131072, min_alloc=4096)
    assert not compressible(bytes(100) + b"x", 512)  # one sector: nothing to save
    # a short last block is zeros past its end: compressed it saves sectors at ashift 9, not at 12
    assert compressible(text[:1000], 4096, min_alloc=512) and not compressible(text[:1000], 4096, min_alloc=4096)


@pytest.mark.parametrize("text,n", [("512", 512), ("128K", 128 << 10), ("1M", 1 << 20), ("1.50K", 1536)])
def test_sizes(text, n):
    assert size_of(text) == n


def test_openzfs_blocks_old_in_compression_checksum_and_copies():
    fx = FX / "openzfs"
    objs = parse_objects((fx / "refresh_zdb-ddddd-bbbbbb.txt").read_text())
    props = dict(line.split("\t") for line in (fx / "refresh_zfs-get-Hp-props.txt").read_text().splitlines())
    lz4 = (fx / "refresh_zpool-get-lz4.txt").read_text().strip() in ("active", "enabled")
    now = Wanted(expected_compression(props["compression"], lz4), expected_checksum(props["checksum"], props["dedup"]),
                 int(props["copies"]), False, int(props["recordsize"]))
    plain, zs, tiny = objs[2], objs[128], objs[129]
    assert plain.dblk == 128 << 10 and [b.offset for b in plain.blocks] == [0, 0x20000, 0x40000]
    text = (b"hello world " * 20000)[:0x20000]
    assert {frozenset(block_reasons(b, now, lambda: text)) for b in plain.blocks} == {frozenset({"compression", "checksum", "copies"})}
    # written under zstd: so small compressed that the data lives in the pointers (nothing to refresh)
    assert (zs.blocks, zs.embedded, tiny.blocks, tiny.embedded) == ([], 3, [], 1)
    assert not record_stale(plain, now) and not record_stale(zs, now)


def test_openzfs_raidz_blocks_written_before_the_expansion_txg_are_at_the_old_ratio():
    from rebal.oldblocks import old_ratio
    from rebal.zfs.expansion import deflate_ratio, raidz_asize
    from rebal.zfs.placement import parse_config

    fx = FX / "openzfs"
    [top] = parse_config((fx / "rz-expanded_zdb-C.txt").read_text())
    assert (top.type, top.nparity, top.width, top.ashift) == ("raidz", 1, 4, 12)
    objs = parse_objects((fx / "rz-expanded_zdb-ddddd-bbbbbb.txt").read_text())
    old_bin, new_bin, later_bin = objs[2], objs[128], objs[3]
    assert raidz_asize(0x20000, 3, 1, 12) == 0x30000 and raidz_asize(0x20000, 4, 1, 12) == 0x2C000
    for ob in (old_bin, new_bin):  # new.bin: written after `zpool wait` returned, before the expansion's txg
        assert len(ob.blocks) == 8 and all(old_ratio(b, {0: top}) == (0x30000, Counter({0: 0x30000}), Counter({0: 0x4000})) for b in ob.blocks)
    assert all(old_ratio(b, {0: top}) == (0, Counter(), Counter()) for b in later_bin.blocks) and len(later_bin.blocks) == 8
    assert deflate_ratio(3, 1, 12) == 341  # `used` of a block: (asize >> 9) * 341


def test_zdb_batches_are_bounded_by_objects_and_bytes():
    from rebal.oldblocks import batches
    from rebal.where import FileObj

    objs = [FileObj("p/d", i, 3 << 30, b"f") for i in range(5)] + [FileObj("p/d", 9, 1, b"s")] * 2500
    got = batches(objs)
    assert [len(b) for b in got][:4] == [1, 1, 1, 1] and sum(len(b) for b in got) == 2505
    assert all(len(b) <= 1000 and (len(b) == 1 or sum(o.alloc for o in b) <= 4 << 30) for b in got)
