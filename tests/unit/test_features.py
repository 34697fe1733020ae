"""What `rebal config check` says of a host's zfs: the features rebal uses, and what it does without each."""

from conftest import FIXTURES, fixture_text

from rebal.zfs.abilities import Abilities
from rebal.zfs.features import features, summary

OPENZFS = (FIXTURES / "openzfs-usage-send-receive.txt").read_text()  # OpenZFS 2.4.4's send and receive usage
EVERYTHING = Abilities.recorded(OPENZFS, OPENZFS, (2, 4, 4))
ZFS_FUSE = Abilities.recorded(fixture_text("zfsfuse_zfs-send-usage.txt.stderr"),
                              fixture_text("zfsfuse_zfs-receive-usage.txt.stderr"))


def test_openzfs_2_4_has_every_feature():
    lines = summary((2, 4, 4), features((2, 4, 4), EVERYTHING, (True, True)))
    assert lines == ["zfs on this host: OpenZFS 2.4.4: every feature rebal uses"]


def test_below_the_packages_minimum_names_what_heal_and_rebalance_lose():
    ab = Abilities.recorded(OPENZFS, OPENZFS, (2, 1, 11))  # the same options as 2.4 (2.1's have these too): no receive -c
    lines = summary((2, 1, 11), features((2, 1, 11), ab, (False, False)))
    assert lines[0] == ("zfs on this host: OpenZFS 2.1.11 (below 2.2, the version rebal's package asks for): "
                        "4 feature(s) missing")
    assert any(line.startswith("  no corrective receive") and "rebal heal" in line for line in lines)
    assert any(line.startswith("  no zfs rewrite (OpenZFS 2.3.4+): rebalance copies") for line in lines)
    assert not any("resumable" in line or "raw" in line for line in lines)


def test_zfs_fuse_is_named_for_what_it_is():
    lines = summary((), features((), ZFS_FUSE, (False, False)))
    assert lines[0].startswith("zfs on this host: zfs without `zfs version` (zfs-fuse")
    assert "below" not in lines[0] and len(lines) == 8


def test_2_3_4_rewrites_but_not_physically():
    found = {f.name: f.have for f in features((2, 3, 4), EVERYTHING, (True, False))}
    assert found["zfs rewrite"] and not found["zfs rewrite -P"] and found["JSON listings (zpool list -j)"]
