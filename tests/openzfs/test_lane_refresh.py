"""`rebal refresh` on real OpenZFS 2.4: compression off -> zstd by `zfs rewrite` in place (the plan's
predicted saving within 15% of what the refresh saves, a second run rewrites nothing) and recordsize
128K -> 1M by a verified copy (the files' block size is 1M after, the tree equals its manifest)."""

import json
import os

import pytest
from refreshscenarios import compression_scenario, recordsize_scenario

pytestmark = pytest.mark.openzfs

FIGURES = os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl")


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_compression_off_to_zstd_in_place(make_pool, tmp_path):
    pool = make_pool([[]], size="1G", ashift=12)
    out = compression_scenario(pool, tmp_path, "zstd", mib=24)
    assert [p["method"] for p in out["run"]["passes"]] == ["rewrite"], out["run"]["passes"]
    assert out["inodes_kept"]  # zfs rewrite: in place
    with open(FIGURES, "a") as f:
        f.write(json.dumps({"test": "refresh-compression", "predicted_saving": out["plan"]["compression"]["saved_bytes"],
                            "saved": out["saved"], "usage": out["run"]["usage"]}) + "\n")


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_recordsize_128k_to_1m_by_copy(make_pool, tmp_path):
    pool = make_pool([[]], size="1G")
    recordsize_scenario(pool, tmp_path, "128K", "1M", 1 << 20, mib=6)


@pytest.mark.lane_long  # the suite runs it on zfs-fuse; about a minute here
def test_a_hardlinked_file_is_counted_once_and_said_left(make_pool, tmp_path):
    from refreshscenarios import hardlink_scenario

    pool = make_pool([[]], size="1G")
    hardlink_scenario(pool, tmp_path, "128K", "1M")


# checksum and copies are also refreshed on zfs-fuse (by copy) in the suite: in place here, in the full
# lane (about a minute each under TCG), as dedup, which zfs-fuse's suite does not cover
@pytest.mark.parametrize("prop,old,new,also", [
    pytest.param("checksum", "fletcher4", "sha256", (), marks=pytest.mark.lane_long),
    pytest.param("copies", "1", "2", (), marks=pytest.mark.lane_long),
    pytest.param("dedup", "off", "on", ("checksum",), marks=pytest.mark.lane_long)])
def test_checksum_copies_and_dedup_refreshed_in_place(make_pool, tmp_path, prop, old, new, also):
    from refreshscenarios import property_scenario

    pool = make_pool([[]], size="1G")
    rep = property_scenario(pool, tmp_path, prop, old, new, also=also)
    assert [p["method"] for p in rep["passes"]] == ["rewrite"]  # zfs rewrite applies each of them
