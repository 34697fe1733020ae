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


def test_the_scheduled_refresh_runs_from_the_config_and_then_finds_nothing(make_pool, tmp_path):
    """[refresh] targets (a dataset name) and `rebal run refresh`, as the timer and the daemon run it:
    recorded as a refresh run; the second run has nothing to rewrite."""
    import os

    from conftest import rebal, rebal_json
    from fsenv import manifest
    from refreshscenarios import text_like
    from zfsenv import sh

    pool = make_pool([[]], size="256M")
    ds = f"{pool.name}/logs"
    sh("zfs", "create", "-o", "compression=off", ds)
    root = pool.mountpoint / "logs"
    for i in range(3):
        text_like(root / f"a{i}.log", 2, seed=i)
    os.sync()
    sh("zfs", "set", "compression=gzip", ds)
    before = manifest(root)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[refresh]\ntargets = ["{ds}"]\n'
                   '[schedule]\nrefresh = "0 2 * * 6"\n')
    r = rebal("run", "refresh", config=cfg)
    assert "3 file(s) rewritten" in r.stderr, r.stderr
    runs = rebal_json("runs", "--kind", "refresh", config=cfg)["runs"]
    assert len(runs) == 1 and runs[0]["outcome"] == "ok" and runs[0]["details"]["old_share_after"] == 0.0, runs
    r2 = rebal("run", "refresh", config=cfg)
    assert "nothing was written under old properties" in r2.stderr, r2.stderr
    assert manifest(root) == before
