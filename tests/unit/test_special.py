"""What a special vdev would take (zfs/special.py) from recorded zdb output, and which files a
rebalance --to special chooses (special.choose/summary), on measured rows."""

from __future__ import annotations

from conftest import fixture_text

from rebal.special import MIN_SHARE, Measured, choose, summary
from rebal.where import FileObj
from rebal.zfs.special import Bound, parse_bound, room, small_limit

# OpenZFS 2.4's zdb -ddddd -bbbbbb of three files on vdev 0: object 2 (384K in three 128K blocks, an
# L1 in two copies: dsize 392K), 129 (embedded), 128 (embedded data, an L1 in three copies: 12K)
TEXT = fixture_text("refresh_zdb-ddddd-bbbbbb.txt")


def test_indirect_blocks_are_metadata_bound_for_the_special_class():
    got = parse_bound(TEXT, normal={0}, small=0)
    assert got[2].meta == 2 * 0x1000 and got[2].small == 0
    assert got[2].alloc == 392 << 10  # zdb's dsize of the object
    assert got[128].meta == 3 * 0x1000 and got[128].alloc == 12 << 10
    assert got[129] == Bound()  # embedded: nothing allocated


def test_data_blocks_count_by_their_physical_size_against_special_small_blocks():
    assert parse_bound(TEXT, normal={0}, small=128 << 10)[2].small == 3 * (128 << 10)
    assert parse_bound(TEXT, normal={0}, small=(128 << 10) - 512)[2].small == 0


def test_blocks_already_on_the_special_vdev_are_not_counted_again():
    got = parse_bound(TEXT, normal={1}, small=128 << 10)
    assert got[2].total == 0 and got[2].on_special == 392 << 10


def test_room_keeps_the_metadata_reserve_from_small_blocks():
    assert room(1000, 600) == (400, 150)
    assert room(1000, 800) == (200, 0)
    assert room(1000, 600, reserve_pct=0) == (400, 400)
    assert small_limit("32768") == 32768 and small_limit("0") == 0 and small_limit("-") == 0


def _m(rows, rest=0, space=10 << 30, alloc=0) -> Measured:
    objs = [(FileObj("p/d", i, b.alloc, f"/p/d/{'s' if b.total * 2 > b.alloc else 'b'}/f{i}".encode()), b, w)
            for i, (b, w) in enumerate(rows)]
    return Measured("p", ["/p/d"], len(rows), objs, rest, {"p/d": 32768},
                    {"vdevs": ["mirror-2"], "size": space, "alloc": alloc}, 25, 0.1)


def test_small_files_are_chosen_and_big_files_whose_metadata_is_a_sliver_are_not():
    small = [Bound(small=8192, alloc=8192) for _ in range(100)]  # all of each moves
    big = [Bound(meta=4096, alloc=1 << 30)]  # 4 KiB of indirect blocks in 1 GiB
    chosen, total = choose(_m([(b, True) for b in small + big]))
    assert total == 100 * 8192 + 4096
    assert len(chosen) == 100 and all(b.alloc == 8192 for _o, b, _w in chosen)
    assert 4096 < MIN_SHARE * (1 << 30)
    everything, _ = choose(_m([(b, True) for b in small + big]), everything=True)
    assert len(everything) == 101


def test_the_files_that_move_most_of_themselves_come_first():
    rows = [(Bound(meta=100, alloc=1000), True) for _ in range(50)] + [(Bound(small=1000, alloc=1000), True)
                                                                     for _ in range(50)]
    chosen, total = choose(_m(rows))
    assert len(chosen) == 100 and total == 50 * 1100
    assert all(b.small for _o, b, _w in chosen[:50])  # the whole-file ones first


def test_a_sample_is_scaled_to_the_tree():
    rows = [(Bound(small=4096, alloc=4096), False) for _ in range(10)]
    s = summary(_m(rows, rest=1000))
    assert s["bound_bytes"] == 1000 * 4096
    assert s["chosen"]["files"] == 1000 and s["chosen"]["small_bytes"] == 1000 * 4096


def test_small_blocks_past_the_reserve_are_predicted_to_stay_and_said():
    rows = [(Bound(small=1 << 20, alloc=1 << 20), True) for _ in range(100)]  # 100 MiB of small blocks
    s = summary(_m(rows, space=100 << 20, alloc=50 << 20))  # 75 MiB may hold small blocks: 25 MiB room
    assert s["predicted"]["small_moved"] == 25 << 20
    assert any("reserve_pct=25" in w for w in s["warnings"])
    assert s["dirs"][0] == {"path": "/p/d/s", "bytes": 100 << 20}
