"""`rebal refresh` on real zfs-fuse pools: compression off -> gzip (zfs-fuse has no zstd and no zfs
rewrite, so every old file is refreshed by a verified copy) and recordsize 128K -> 32K."""

import pytest
from refreshscenarios import compression_scenario, recordsize_scenario

pytestmark = pytest.mark.zfs


def test_compression_off_to_gzip_predicted_and_refreshed(make_pool, tmp_path):
    pool = make_pool([[]], size="256M", ashift=12)
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


def test_two_passes_share_one_max_bytes_and_the_next_run_finishes(make_pool, tmp_path):
    """Files old only in compression (one block each) and a file whose block size must change: two
    passes (a rewrite, where zfs-fuse copies, then a copy). --max-bytes bounds the run, not each pass:
    what the first pass used is gone for the second, which leaves the big file for the next run."""
    import json
    import os

    from conftest import rebal
    from fsenv import manifest
    from refreshscenarios import text_like
    from zfsenv import sh, write_cfg

    pool = make_pool([[]], size="256M")
    ds = f"{pool.name}/mixed"
    sh("zfs", "create", "-o", "compression=off", "-o", "recordsize=128K", ds)
    root = pool.mountpoint / "mixed"
    (root / "small").mkdir()
    for i in range(3):
        with open(root / "small" / f"s{i}.txt", "wb") as f:
            f.write((b"row %d of a small table\n" % i) * 800)  # about 19 KiB: one block
    text_like(root / "big.log", 1)  # 1 MiB in 8 blocks of 128K
    os.sync()
    sh("zfs", "set", "compression=gzip", ds)
    sh("zfs", "set", "recordsize=32K", ds)
    before = manifest(root)
    cfg = write_cfg(tmp_path)
    first = json.loads(rebal("refresh", str(root), "--max-bytes", "100K", "--json", config=cfg).stdout.splitlines()[-1])
    passes = {p["why"]: p for p in first["passes"]}
    assert passes["block size"]["rewritten_files"] == 0, first  # the budget went to the first pass
    assert sum(p["rewritten_files"] for p in first["passes"]) == 3 and first["old_bytes_after"] > 0, first
    second = json.loads(rebal("refresh", str(root), "--json", config=cfg).stdout.splitlines()[-1])
    assert [(p["why"], p["rewritten_files"]) for p in second["passes"]] == [("block size", 1)], second
    assert second["old_share_after"] == 0.0
    third = json.loads(rebal("refresh", str(root), "--json", config=cfg).stdout.splitlines()[-1])
    assert third["passes"] == [] and manifest(root) == before


def test_excluded_files_are_neither_rewritten_nor_counted(make_pool, tmp_path):
    import json
    import os

    from conftest import rebal
    from refreshscenarios import text_like
    from zfsenv import sh, write_cfg

    pool = make_pool([[]], size="256M")
    ds = f"{pool.name}/logs"
    sh("zfs", "create", "-o", "compression=off", ds)
    root = pool.mountpoint / "logs"
    (root / "keep" / "deep").mkdir(parents=True)
    text_like(root / "a.log", 1)
    text_like(root / "keep" / "deep" / "b.log", 1)
    os.sync()
    sh("zfs", "set", "compression=gzip", ds)
    ino = os.stat(root / "keep" / "deep" / "b.log").st_ino
    cfg = write_cfg(tmp_path)
    r = json.loads(rebal("refresh", str(root), "--exclude", "keep", "--json", config=cfg).stdout.splitlines()[-1])
    assert r["outcome"] == "ok" and r["files"] == 1 and r["old_share_after"] == 0.0, r
    assert sum(p["rewritten_files"] for p in r["passes"]) == 1
    assert os.stat(root / "keep" / "deep" / "b.log").st_ino == ino  # left alone (a copy would be a new inode)


def test_a_hardlinked_file_is_counted_once_and_said_left(make_pool, tmp_path):
    from refreshscenarios import hardlink_scenario

    pool = make_pool([[]], size="256M")
    hardlink_scenario(pool, tmp_path, "128K", "32K")


@pytest.mark.parametrize("prop,old,new", [("checksum", "fletcher2", "sha256"), ("copies", "1", "2")])
def test_checksum_and_copies_refreshed(make_pool, tmp_path, prop, old, new):
    from refreshscenarios import property_scenario

    pool = make_pool([[]], size="256M")
    rep = property_scenario(pool, tmp_path, prop, old, new)
    assert [p["method"] for p in rep["passes"]] == ["copy"]  # zfs-fuse has no zfs rewrite
