"""zdb parsers (rebal/zfs/placement.py): on zfs-fuse's zdb output recorded here, and on a text in
OpenZFS's layout (its object table has a dnsize column), written for this test; the real OpenZFS
output is read by tests/integration/test_where_zfs.py in the lane, against its own parse of zdb."""

from collections import Counter

from conftest import fixture_text

from rebal.zfs import placement


def test_zfs_fuse_objects_and_config():
    objs = placement.parse_objects(fixture_text("zfsfuse_two-files_zdb-ddddd.txt"))
    assert set(objs) == {5, 6}
    assert sum(objs[5].values()) == 24 * 0x20000  # 3 MiB in 24 blocks of 128 KiB, one copy each
    assert set(objs[5]) <= {0, 1, 2} and len(objs[5]) >= 2
    assert sum(objs[6].values()) == 5 * 0x20000
    tops = placement.parse_config(fixture_text("zfsfuse_three-files_zdb-C.txt"))
    assert [(t.id, t.type, t.is_log) for t in tops] == [(0, "file", False), (1, "file", False), (2, "file", False)]
    assert placement.name_map(tops, ["d1", "d2", "d3"]) == {0: "d1", 1: "d2", 2: "d3"}


def test_openzfs_layout_and_levels():
    """Only level-0 blocks are the file's data; every DVA of a block counts (copies=2); an
    embedded block has none."""
    text = """Dataset tank/data [ZPL], ID 54, cr_txg 1, 25.5K, 7 objects

    Object  lvl   iblk   dblk  dsize  dnsize  lsize   %full  type
         2    2   128K   128K   512K     512   256K  100.00  ZFS plain file
Indirect blocks:
               0 L1  0:5c000:1000 1:7000:1000 20000L/1000P F=2 B=10/10 cksum=1
               0  L0 0:6c000:20000 1:9c000:20000 20000L/20000P F=1 B=9/9 cksum=2
           20000  L0 2:8c000:20000 20000L/20000P F=1 B=9/9 cksum=3

    Object  lvl   iblk   dblk  dsize  dnsize  lsize   %full  type
         3    1   128K    512      0     512    512  100.00  ZFS plain file
Indirect blocks:
               0  L0 EMBEDDED et=0 200L/19P B=9
"""
    objs = placement.parse_objects(text)
    assert objs == {2: Counter({0: 0x20000, 1: 0x20000, 2: 0x20000}), 3: Counter()}


def test_log_and_special_vdevs_are_not_data():
    tops = [placement.TopVdev(0, "mirror", "", 0, False, ""), placement.TopVdev(1, "disk", "/dev/sdz", 0, True, ""),
            placement.TopVdev(2, "mirror", "", 0, False, "special"), placement.TopVdev(3, "raidz", "", 1, False, "")]
    assert placement.data_vdev_ids(tops) == [0, 3]
    assert placement.name_map(tops, ["mirror-0", "raidz1-3"]) == {0: "mirror-0", 1: "vdev-1", 2: "vdev-2", 3: "raidz1-3"}


def test_a_special_vdev_is_told_from_the_data_vdevs_by_guid():
    """OpenZFS 2.4.4, recorded: two file vdevs and a special mirror added. `zdb -C` does not say which
    top-level vdev is special (the bias lives in the vdev's ZAP): by the config alone all three looked
    like data vdevs, so `where` named every vdev vdev-N and `--to special` counted blocks on the
    special vdev as still on the normal ones. zpool's JSON gives the guids that tell them apart."""
    from conftest import fixture_text

    from rebal.zfs.parse import parse_zpool_list_json
    from rebal.zfs.placement import data_vdev_ids, name_map, parse_config

    tops = parse_config(fixture_text("special-mirror_zdb-C.txt"))
    [pool] = parse_zpool_list_json(fixture_text("special-mirror_zpool-list-v-j.json"))
    assert [v.vclass for v in pool.vdevs] == ["normal", "normal", "special"]
    guids = [v.guid for v in pool.data_vdevs]
    assert all(guids) and data_vdev_ids(tops) == [0, 1, 2]  # the config alone: the special one among them
    assert data_vdev_ids(tops, set(guids)) == [0, 1]
    names = name_map(tops, [v.name for v in pool.data_vdevs], guids)
    assert names == {0: "/var/tmp/sp/d0", 1: "/var/tmp/sp/d1", 2: "vdev-2"}
