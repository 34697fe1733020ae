"""`rebal refresh` on real zfs-fuse pools: compression off -> gzip (zfs-fuse has no zstd and no zfs
rewrite, so every old file is refreshed by a verified copy) and recordsize 128K -> 32K."""

import pytest
from refreshscenarios import compression_scenario, recordsize_scenario

pytestmark = pytest.mark.zfs


def test_compression_off_to_gzip_predicted_and_refreshed(make_pool, tmp_path):
    pool = make_pool([[]], size="256M")
    out = compression_scenario(pool, tmp_path, "gzip", mib=12)
    assert [p["method"] for p in out["run"]["passes"]] == ["copy"] and not out["inodes_kept"]  # no zfs rewrite here


def test_recordsize_128k_to_32k_by_copy(make_pool, tmp_path):
    pool = make_pool([[]], size="256M")
    recordsize_scenario(pool, tmp_path, "128K", "32K", 32 << 10)
