import pytest

from rebal import fill, names
from rebal.errors import UsageError
from rebal.state import SampleRow
from rebal.units import human, parse_size
from rebal.zfs.model import Pool, Vdev


def test_spread_counts_only_data_vdevs():
    p = Pool("t", 0, 0, 0, "ONLINE", (
        Vdev("a", "disk", 100, 70, 30), Vdev("b", "disk", 100, 10, 90),
        Vdev("log0", "disk", 100, 99, 1, vclass="log"), Vdev("sp", "mirror", 100, 0, 100, vclass="special"),
    ))
    assert p.spread == pytest.approx(60.0)
    j = fill.pool_json(p, 10)
    assert [v["name"] for v in j["vdevs"]] == ["a", "b"]
    assert [v["name"] for v in j["other_vdevs"]] == ["log0", "sp"]
    assert j["over_target"] is True and j["spread"] == 60.0
    assert set(j["vdevs"][0]) >= {"name", "type", "size", "alloc", "free", "cap"}


def test_single_vdev_has_no_spread():
    assert Pool("t", 0, 0, 0, "", (Vdev("a", "disk", 100, 70, 30),)).spread == 0.0


def test_bar_and_sparkline():
    assert fill.bar(0, 10) == "·" * 10
    assert fill.bar(100, 10) == "█" * 10
    assert fill.bar(55, 10).startswith("█████▌")
    assert fill.sparkline([0, 50, 100], 10) == "▁▅█"
    assert len(fill.sparkline(list(range(1000)), 40)) == 40


def test_parse_since():
    assert fill.parse_since("2d", now=1_000_000) == 1_000_000 - 2 * 86400
    assert fill.parse_since("2026-11-01") == 1793491200
    with pytest.raises(UsageError):
        fill.parse_since("yesterday")


def test_history_series_handles_vdevs_added_later():
    rows = [SampleRow(1, 0, {"a": (100, 50)}), SampleRow(2, 50, {"a": (100, 50), "b": (100, 0)})]
    # a vdev added later starts where it appears on the same time axis (issue 69 item 9: not aligned)
    assert fill.history_series(rows) == {"a": [50.0, 50.0], "b": [None, 0.0]}
    assert fill.sparkline([None, None, 100.0], 10) == "  █"
    assert fill.sparkline([None] * 50 + [100.0] * 50, 10) == "     █████"
    j = fill.history_json("t", rows)
    assert j["samples"][1]["vdevs"]["b"]["cap"] == 0.0 and j["samples"][0]["ts"] == "1970-01-01T00:00:01Z"


def test_short_names():
    assert fill.short_names(["/x/d1", "/y/d2", "mirror-1"]) == {"/x/d1": "d1", "/y/d2": "d2", "mirror-1": "mirror-1"}
    assert fill.short_names(["/x/d1", "/y/d1"]) == {"/x/d1": "/x/d1", "/y/d1": "/y/d1"}


def test_units():
    assert human(0) == "0B" and human(1536) == "1.50K" and human(960 * 2**20) == "960M"
    assert parse_size("10G") == 10 * 2**30 and parse_size("4096") == 4096
    with pytest.raises(UsageError):
        parse_size("ten")


@pytest.mark.parametrize("bad", ["-o", "1tank", "mirror", "raidz2", "ta nk", "tank\n", ""])
def test_bad_pool_names(bad):
    assert names.pool_problem(bad)


@pytest.mark.parametrize("good", ["tank", "tank/data", "tank/a.b:c_d-e", "t/x/y"])
def test_good_datasets(good):
    assert names.dataset_problem(good) is None


@pytest.mark.parametrize("bad", ["tank/", "/tank", "tank//x", "tank/-x", "tank/..", "tank@s", "tank/a b", "x" * 300])
def test_bad_datasets(bad):
    assert names.dataset_problem(bad)


def test_snapshot_and_host_names():
    assert names.snapshot_problem("tank/d@rebal-x-2026") is None
    assert names.snapshot_problem("tank/d") and names.snapshot_problem("tank/d@-x")
    assert names.host_problem("backup.lan") is None and names.host_problem("127.0.0.1") is None
    assert names.host_problem("::1") is None
    assert names.host_problem("-oProxyCommand=x") and names.host_problem("a b")
