"""`zfs rewrite` detection and command lines, against the usage text real OpenZFS 2.4.4 printed."""

import pytest
from conftest import fixture_text

from rebal.rebalance import rewrite
from rebal.runner import Result
from rebal.zfs.cli import Zfs, parse_rewrite_usage


def test_usage_of_openzfs_2_4_has_rewrite_with_P():
    assert parse_rewrite_usage(fixture_text("zfs-rewrite-noargs.txt.stderr")) == (True, True)


def test_zfs_fuse_has_no_rewrite():
    assert parse_rewrite_usage("unrecognized command 'rewrite'\nusage: zfs command args ...\n") == (False, False)


def test_usage_without_P():
    assert parse_rewrite_usage("usage:\n\trewrite [-rvx] [-o <offset>] [-l <length>] <directory|file ...>\n") == (True, False)


class Replay:
    """Answers zfs/zpool calls with recorded OpenZFS output; records the command lines."""

    def __init__(self, feature="enabled"):
        self.calls = []
        self.feature = feature

    def __call__(self, argv, **kw):
        argv = tuple(argv)
        self.calls.append(argv)
        if argv == ("zfs", "rewrite"):
            return Result(argv, 2, "", fixture_text("zfs-rewrite-noargs.txt.stderr"))
        if argv[:2] == ("zpool", "get"):
            return Result(argv, 0, self.feature + "\n", "")
        return Result(argv, 0, "", "")


@pytest.mark.parametrize("feature, physical", [("enabled", True), ("active", True), ("disabled", False), ("", False)])
def test_detect_uses_P_only_with_the_pool_feature(feature, physical):
    from rebal.zfs.cli import Zpool

    r = Replay(feature)
    sup = rewrite.detect(Zfs(r), Zpool(r), "tank")
    assert sup.available and sup.physical is physical
    assert ("zpool", "get", "-H", "-o", "value", "feature@physical_rewrite", "tank") in r.calls


def test_settle_on_openzfs_waits_for_freeing_to_reach_zero():
    """`zpool sync`, then `freeing` polled until 0 (OpenZFS); old ZFS: a property set and cleared."""
    from rebal.errors import UnsupportedOption
    from rebal.zfs.cli import Zpool

    answers = iter(["1048576\n", "4096\n", "0\n"])
    calls = []

    def openzfs(argv, **kw):
        calls.append(tuple(argv))
        if argv[:2] == ["zpool", "get"]:
            return Result(tuple(argv), 0, next(answers), "")
        return Result(tuple(argv), 0, "", "")

    Zpool(openzfs).settle("tank")
    assert calls[0] == ("zpool", "sync", "tank")
    assert calls.count(("zpool", "get", "-Hp", "-o", "value", "freeing", "tank")) == 3

    old = []

    def zfs_fuse(argv, **kw):
        old.append(tuple(argv))
        if argv[:2] == ["zpool", "sync"]:
            raise UnsupportedOption(tuple(argv), 2, "unrecognized command 'sync'\nusage: zpool command args ...")
        return Result(tuple(argv), 0, "", "")

    Zpool(zfs_fuse).settle("tank")
    assert old[1:] == [("zfs", "set", "rebal:settle=1", "tank"), ("zfs", "inherit", "rebal:settle", "tank")]
