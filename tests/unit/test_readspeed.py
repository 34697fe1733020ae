"""`rebal where --read`'s reading of `zpool iostat -v POOL 1` (readspeed.py), on zfs-fuse's recorded
output: one report per interval, the data vdevs' rows by their `rebal status` names."""

from pathlib import Path

from rebal.readspeed import parse_reports, top_rows

FX = Path(__file__).resolve().parents[1] / "fixtures" / "zfs-fuse"


def test_reports_and_the_data_vdevs_rows():
    text = (FX / "zfsfuse_mixed_zpool-iostat-v.txt").read_text()
    lines = [(float(i), ln) for i, ln in enumerate((text + "\n" + text).splitlines())]
    reps = parse_reports(lines)
    assert len(reps) == 2 and reps[1].at > reps[0].at
    rows = top_rows(reps[1], ["/tmp/p/d1", "/tmp/p/d2", "mirror-2"])
    # zfs-fuse names a mirror `mirror`: it is the next mirror among the data vdevs; the log device
    # (/tmp/p/d5, at the same indent, with no `logs` header in zfs-fuse) and the mirror's disks are left out
    assert rows == {"/tmp/p/d1": (0, 2376), "/tmp/p/d2": (0, 2376), "mirror-2": (0, 0)}, rows


def test_a_vdev_named_as_openzfs_names_it_is_matched_by_name():
    lines = [(1.0, "                capacity     operations     bandwidth"),
             (1.0, "pool          alloc   free   read  write   read  write"),
             (1.0, "------------  -----  -----  -----  -----  -----  -----"),
             (1.0, "tank          1.00G  1.00G    120      0  15.0M      0"),
             (1.0, "  mirror-0     900M   100M    100      0  12.5M      0"),
             (1.0, "    vdb           -      -     50      0  6.25M      0"),
             (1.0, "    vdc           -      -     50      0  6.25M      0"),
             (1.0, "  mirror-1     100M   900M     20      0  2.50M      0"),
             (1.0, "    vdd           -      -     10      0  1.25M      0"),
             (1.0, "    vde           -      -     10      0  1.25M      0"),
             (1.0, "logs              -      -      -      -      -      -"),
             (1.0, "  vdf             0   100M      0      0      0      0")]
    [rep] = parse_reports(lines)
    assert top_rows(rep, ["mirror-0", "mirror-1"]) == {"mirror-0": (100, round(12.5 * (1 << 20))), "mirror-1": (20, round(2.5 * (1 << 20)))}
