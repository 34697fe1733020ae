"""`zfs rewrite` detection and command lines, against the usage text real OpenZFS 2.4.4 printed."""

import pytest
from conftest import fixture_text

from rebal.process.command import Result
from rebal.rebalance import rewrite
from rebal.zfs.host import ZfsHost
from rebal.zfs.host_fs import parse_rewrite_usage


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
            # the recorded answer (physical_rewrite enabled), with the state asked for; a zpool that
            # does not know the feature leaves its line out (fx_...-unknown-feature.txt)
            text = fixture_text("fx_zpool-get-H-o-property-value-unknown-feature.txt")
            return Result(argv, 0, text.replace("enabled", self.feature) if self.feature else "", "")
        return Result(argv, 0, "", "")


@pytest.mark.parametrize("feature, physical", [("enabled", True), ("active", True), ("disabled", False), ("", False)])
def test_detect_uses_P_only_with_the_pool_feature(feature, physical):

    r = Replay(feature)
    sup = rewrite.detect(ZfsHost.here(r), "tank")
    assert sup.available and sup.physical is physical
    assert ("zpool", "get", "-H", "-o", "property,value", "feature@physical_rewrite", "tank") in r.calls
    # a zpool that knows the feature is 2.4+: zfs is not asked for its usage text as well
    assert (("zfs", "rewrite") in r.calls) is (feature == "")


def test_detect_on_2_3_4_has_rewrite_without_P_and_on_zfs_fuse_none():

    def older(usage):
        def run(argv, **kw):
            if tuple(argv) == ("zfs", "rewrite"):
                return Result(tuple(argv), 2, "", usage)
            return Result(tuple(argv), 1, "", "bad property list: invalid property 'feature@physical_rewrite'\n")
        return run

    r = older("usage:\n\trewrite [-rvx] [-o <offset>] [-l <length>] <directory|file ...>\n")
    assert rewrite.detect(ZfsHost.here(r), "tank") == rewrite.RewriteSupport(True, False)
    r = older("unrecognized command 'rewrite'\nusage: zfs command args ...\n")
    assert rewrite.detect(ZfsHost.here(r), "tank") == rewrite.RewriteSupport(False, False)


def test_settle_on_openzfs_waits_for_freeing_to_reach_zero():
    """`zpool sync`, then `freeing` polled until 0 (OpenZFS); old ZFS: a property set and cleared."""

    answers = iter(["1048576\n", "4096\n", "0\n"])  # (the values only: `-o value`)
    calls = []

    def openzfs(argv, **kw):
        calls.append(tuple(argv))
        if argv[:2] == ["zpool", "get"]:
            return Result(tuple(argv), 0, next(answers), "")
        return Result(tuple(argv), 0, "", "")

    ZfsHost.here(openzfs).settle("tank")
    assert calls[0] == ("zpool", "sync", "tank")
    assert calls.count(("zpool", "get", "-Hp", "-o", "value", "freeing", "tank")) == 3

    old = []

    def zfs_fuse(argv, **kw):
        old.append(tuple(argv))
        if argv[:2] == ["zpool", "sync"]:  # zfs-fuse's zpool: no such command (asked without check)
            return Result(tuple(argv), 2, "", "unrecognized command 'sync'\nusage: zpool command args ...")
        return Result(tuple(argv), 0, "", "")

    ZfsHost.here(zfs_fuse).settle("tank")
    assert old[1:] == [("zfs", "set", "rebal:settle=1", "tank"), ("zfs", "inherit", "rebal:settle", "tank")]


def test_settled_reads_freeing_with_the_figures_and_again_only_while_frees_run():
    """`zpool list` says `freeing` beside the figures (OpenZFS 2.3+): one process after `zpool sync`;
    where frees were still under way, freeing is polled to 0 and the figures read again (the
    recorded output of a pool right after a destroy, and of the same pool settled, as answers)."""

    settled = fixture_text("fx_zpool-list-v-j-json-int-o-freeing.json")
    freeing = fixture_text("fx-freeing_zpool-list-v-j-json-int-o-freeing.json")

    def zpool(listings, answers=iter(())):
        calls = []

        def run(argv, **kw):
            calls.append(tuple(argv))
            if argv[:2] == ["zpool", "get"]:
                return Result(tuple(argv), 0, next(answers), "")
            if argv[:2] == ["zpool", "list"]:
                return Result(tuple(argv), 0, next(listings), "")
            return Result(tuple(argv), 0, "", "")
        return ZfsHost.here(run), calls

    z, calls = zpool(iter([settled]))
    found = z.settled("fx")
    assert (found.name, found.freeing) == ("fx", 0)
    assert [c[:2] for c in calls] == [("zpool", "sync"), ("zpool", "list")]  # no `zpool get freeing`
    assert "freeing" in calls[1][calls[1].index("-o") + 1]

    from rebal.zfs.parse import parse_zpool_list_json

    [during] = parse_zpool_list_json(freeing)
    assert during.freeing == 377577472
    z, calls = zpool(iter([freeing, settled]), iter(["4096\n", "0\n"]))
    found = z.settled("fx")
    assert found.freeing == 0 and found == parse_zpool_list_json(settled)[0]
    assert [c[:2] for c in calls] == [("zpool", "sync"), ("zpool", "list"), ("zpool", "get"), ("zpool", "get"),
                                      ("zpool", "list")]  # the figures after the frees, not before


def _features_replay(features_file, calls):
    def run(argv, **kw):
        argv = tuple(argv)
        calls.append(argv)
        if argv[:2] == ("zpool", "get"):
            return Result(argv, 0, fixture_text(features_file), "")
        if argv[:2] == ("zpool", "status"):
            return Result(argv, 0, fixture_text("rz-expanded_zpool-status-v.txt"), "")
        raise AssertionError(f"not expected: {argv}")
    return run


@pytest.mark.parametrize("recorded, states", [
    ("fx_zpool-get-H-o-property-value-features.txt", {"physical_rewrite": "enabled", "raidz_expansion": "enabled"}),
    ("rz-expanded_zpool-get-H-o-property-value-features.txt", {"physical_rewrite": "enabled", "raidz_expansion": "active"}),
    ("fx_zpool-get-H-o-property-value-unknown-feature.txt", {"physical_rewrite": "enabled"}),
])
def test_features_are_read_in_one_zpool_get(recorded, states):

    calls = []
    got = ZfsHost.here(_features_replay(recorded, calls)).pool_features("tank", ("physical_rewrite", "raidz_expansion"))
    assert got == states
    assert calls == [("zpool", "get", "-H", "-o", "property,value", "feature@physical_rewrite,feature@raidz_expansion",
                      "tank")]


def test_features_of_a_zpool_that_fails_on_them_are_none():

    def zfs_fuse(argv, **kw):
        return Result(tuple(argv), 2, "", "bad property list: invalid property 'feature@physical_rewrite'\n")

    assert ZfsHost.here(zfs_fuse).pool_features("tank", ("physical_rewrite", "raidz_expansion")) == {}


@pytest.mark.parametrize("recorded, asks_status", [
    ("fx_zpool-get-H-o-property-value-features.txt", False),  # enabled: never expanded
    ("rz-expanded_zpool-get-H-o-property-value-features.txt", True),  # active: an expansion was started once
    ("fx_zpool-get-H-o-property-value-unknown-feature.txt", True),  # not said: asked, as before
])
def test_zpool_status_is_asked_only_where_the_expansion_feature_may_be_active(recorded, asks_status):
    from concurrent.futures import Future

    from rebal.rebalance.prepare import _expansions

    calls = []
    zpool = ZfsHost.here(_features_replay(recorded, calls))
    f = Future()
    f.set_result(zpool.pool_features("rz", ("physical_rewrite", "raidz_expansion")))
    found = _expansions(zpool, "rz", f)
    assert (("zpool", "status", "rz") in calls) is asks_status
    assert bool(found) is asks_status  # the recorded status of an expanded raidz names its expansion


@pytest.mark.parametrize("recorded, states", [
    ("fx_zpool-list-v-j-json-int-o-features.json", {"physical_rewrite": "enabled", "raidz_expansion": "enabled"}),
    ("rz-expanded_zpool-list-v-j-json-int-o-features.json", {"physical_rewrite": "enabled", "raidz_expansion": "active"}),
    ("fx_zpool-list-v-j-json-int-o-unknown-feature.json", {"raidz_expansion": "enabled"}),
    ("fx_zpool-list-v-j-json-int-o-freeing.json", None),  # not asked
])
def test_features_come_with_the_figures_in_one_zpool_list(recorded, states):
    from rebal.zfs.parse import parse_zpool_list_json

    [pool] = parse_zpool_list_json(fixture_text(recorded))
    assert (dict(pool.features) if pool.features is not None else None) == states
    hash(pool)  # a frozen value: still hashable with its features
    assert pool.size > 0 and len(pool.data_vdevs) in (1, 2)


def test_a_run_asks_the_features_with_the_figures_and_zpool_get_only_where_they_did_not_come():
    """prepare's first questions on OpenZFS 2.4: `zpool list` with the features, no `zpool get`, no
    `zpool status` (the expansion feature only enabled); where `zpool list` could not say them, `zpool get`."""
    from concurrent.futures import Future

    from rebal.rebalance.prepare import _features
    from rebal.zfs.queries import features

    calls = []

    def run(argv, **kw):
        calls.append(tuple(argv))
        if argv[:2] == ["zpool", "list"]:  # the recorded answer to the columns asked
            asked = "feature@" in argv[argv.index("-o") + 1]
            return Result(tuple(argv), 0, fixture_text("fx_zpool-list-v-j-json-int-o-features.json" if asked
                                                       else "fx_zpool-list-v-j-json-int-o-freeing.json"), "")
        return Result(tuple(argv), 0, fixture_text("fx_zpool-get-H-o-property-value-features.txt"), "")

    z = ZfsHost.here(run)
    f = Future()
    f.set_result(z.pools(["fx"], features(True)))
    assert _features(z, "fx", f, features(True)) == {"physical_rewrite": "enabled", "raidz_expansion": "enabled"}
    assert [c[:2] for c in calls] == [("zpool", "list")]
    assert calls[0][-2].endswith(",feature@physical_rewrite,feature@raidz_expansion")

    f = Future()
    f.set_result([ZfsHost.here(run).pools(["fx"])[0]])  # figures without features (an older zpool's flavour)
    assert _features(z, "fx", f, features(True)) == {"physical_rewrite": "enabled", "raidz_expansion": "enabled"}
    assert [c[:2] for c in calls[-1:]] == [("zpool", "get")]
