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
    # a zpool that knows the feature is 2.4+: zfs is not asked for its usage text as well
    assert (("zfs", "rewrite") in r.calls) is (feature == "")


def test_detect_on_2_3_4_has_rewrite_without_P_and_on_zfs_fuse_none():
    from rebal.zfs.cli import Zpool

    def older(usage):
        def run(argv, **kw):
            if tuple(argv) == ("zfs", "rewrite"):
                return Result(tuple(argv), 2, "", usage)
            return Result(tuple(argv), 1, "", "bad property list: invalid property 'feature@physical_rewrite'\n")
        return run

    r = older("usage:\n\trewrite [-rvx] [-o <offset>] [-l <length>] <directory|file ...>\n")
    assert rewrite.detect(Zfs(r), Zpool(r), "tank") == rewrite.RewriteSupport(True, False)
    r = older("unrecognized command 'rewrite'\nusage: zfs command args ...\n")
    assert rewrite.detect(Zfs(r), Zpool(r), "tank") == rewrite.RewriteSupport(False, False)


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


def test_settled_reads_the_figures_beside_freeing_and_again_only_while_frees_run():
    """`zpool list` runs beside the first `freeing` query; when that says frees were still under
    way, freeing is polled to 0 and the figures read again (the pool's recorded output as answer)."""
    from rebal.zfs.cli import Zpool

    import json

    whole = json.loads(fixture_text("final_zpool-list-j-json-int.json"))
    name = next(iter(whole["pools"]))
    listing = json.dumps(whole | {"pools": {name: whole["pools"][name]}})  # as `zpool list ... NAME` answers

    def zpool(answers):
        calls = []

        def run(argv, **kw):
            calls.append(tuple(argv))
            if argv[:2] == ["zpool", "get"]:
                return Result(tuple(argv), 0, next(answers), "")
            if argv[:2] == ["zpool", "list"]:
                return Result(tuple(argv), 0, listing, "")
            return Result(tuple(argv), 0, "", "")
        return Zpool(run), calls

    z, calls = zpool(iter(["0\n"]))
    assert z.settled(name).name == name
    assert calls[0] == ("zpool", "sync", name)
    assert sorted(c[:2] for c in calls[1:]) == [("zpool", "get"), ("zpool", "list")]

    z, calls = zpool(iter(["8192\n", "4096\n", "0\n"]))
    assert z.settled(name).name == name
    assert [c[:2] for c in calls].count(("zpool", "get")) == 3
    assert [c[:2] for c in calls].count(("zpool", "list")) == 2
    assert calls[-1][:2] == ("zpool", "list")  # the figures after the frees, not before
