"""Replication setups admins already run (issue 37), on real zfs-fuse pools and a real sshd on loopback:
chosen datasets, a local target, two jobs on one source, hooks, the wire's options, snapshot ages."""

import json
import os
import sqlite3

import pytest
from conftest import rebal, rebal_json
from replscenarios import mountpoint, snaps
from setupscenarios import (
    excludes_scenario,
    exists,
    hooks_scenario,
    local_block,
    property_scenario,
    put,
    same,
    write_cfg,
)
from zfsenv import sh

pytestmark = pytest.mark.zfs


@pytest.fixture
def pools(make_pool):
    return make_pool([[], []], size="256M"), make_pool([[]], size="512M")


def test_exclude_and_include_patterns(pools, backup_host, tmp_path):
    excludes_scenario(*pools, backup_host, tmp_path)


def test_selection_by_the_rebal_backup_property(pools, backup_host, tmp_path):
    property_scenario(*pools, backup_host, tmp_path)


def test_local_target_zfs(pools, tmp_path):
    """No target_host: zfs send | zfs receive on this host, no ssh; incremental next time; the
    target's retention prunes there."""
    src, dst = pools
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    sh("zfs", "create", f"{d}/kid")
    put(d, "f")
    put(f"{d}/kid", "f")
    cfg = write_cfg(tmp_path, [local_block(name="usb", source=d, target=f"{dst.name}/usb", recursive=True,
                                           mbuffer=True, mbuffer_size="8M", stream_compress="zstd")
                               + "[replicate.retention_target]\nlast = 2\nhourly = 0\ndaily = 0\nweekly = 0\nmonthly = 0\n"])
    plan = rebal_json("replicate", "usb", "--dry-run", config=cfg)
    assert plan["local_target"] is True and not any("ssh" in p for p in plan["planned"]), plan["planned"]
    r1 = rebal_json("replicate", "usb", config=cfg)
    assert r1["outcome"] == "ok" and r1["remote_commands"] == 0, r1
    assert {x["kind"] for x in r1["datasets"]} == {"full"}
    assert "a local target: the stream is not compressed (no network to save)" in r1["notes"]
    same(d, f"{dst.name}/usb")
    same(f"{d}/kid", f"{dst.name}/usb/kid")
    seen = [r1["snapshot"]]
    for i in range(2):
        put(f"{d}/kid", f"g{i}")
        r = rebal_json("replicate", "usb", config=cfg)
        assert r["outcome"] == "ok" and {x["kind"] for x in r["datasets"]} == {"incremental"}, r
        seen.append(r["snapshot"])
        same(f"{d}/kid", f"{dst.name}/usb/kid")
    assert snaps(f"{dst.name}/usb/kid") == sorted(seen[-2:]), "the target keeps the newest 2 (last = 2)"
    v = rebal("verify", "usb", "--json", config=cfg, check=False)
    assert json.loads(v.stdout)["level"] == "OK", v.stdout


def test_local_target_rsync(pools, tmp_path):
    src, dst = pools
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    sh("zfs", "create", f"{dst.name}/files")
    put(d, "f")
    os.makedirs(os.path.join(mountpoint(d), "sub"))
    put(d, "sub/x")
    target = os.path.join(mountpoint(f"{dst.name}/files"), "data")
    cfg = write_cfg(tmp_path, [local_block(name="disk", source=d, target=target, mode="rsync", snapshot_target=True)])
    r1 = rebal_json("replicate", "disk", config=cfg)
    assert r1["outcome"] == "ok", r1
    assert r1["target_snapshot"] == f"{dst.name}/files@{r1['snapshot']}"
    os.unlink(os.path.join(mountpoint(d), "f"))
    put(d, "sub/y")
    r2 = rebal_json("replicate", "disk", config=cfg)
    assert r2["outcome"] == "ok" and r2["files_transferred"] == 1, r2
    from fsenv import manifest

    assert manifest(mountpoint(d)) == manifest(target)
    v = rebal("verify", "disk", "--json", config=cfg, check=False)
    assert json.loads(v.stdout)["level"] == "OK", v.stdout


def test_two_jobs_on_one_source_one_failing_for_a_week(pools, backup_host, tmp_path):
    from setupscenarios import two_jobs_one_failing_scenario

    out = two_jobs_one_failing_scenario(*pools, backup_host, tmp_path)
    assert out["cursor"] == "hold"  # zfs-fuse has no bookmarks: the base is a held snapshot


def test_hooks_around_a_run(pools, backup_host, tmp_path):
    src, dst = pools
    hooks_scenario(src, dst, tmp_path, lambda **h: backup_host.config_block(
        name="hk", source=f"{src.name}/data", target=f"{dst.name}/copy", **h))


def test_ssh_options_and_stream_filters(pools, backup_host, tmp_path):
    """ssh_options reach ssh (an unknown cipher fails the run, said; a valid one works); zstd at a
    level and mbuffer of a size go on the wire where both ends have them."""
    src, dst = pools
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    put(d, "f", size=2_000_000)
    bad = write_cfg(tmp_path, [backup_host.config_block(name="w", source=d, target=f"{dst.name}/w",
                                                        ssh_options=["Ciphers=no-such-cipher"])])
    r = rebal("replicate", "w", "--json", config=bad, check=False)
    out = json.loads(r.stdout)
    assert out["outcome"] == "failed" and r.returncode == 6 and "no-such-cipher" in out["error"].lower() + r.stderr.lower(), (out, r.stderr)
    good = write_cfg(tmp_path, [backup_host.config_block(
        name="w", source=d, target=f"{dst.name}/w", ssh_options=["Ciphers=aes128-ctr", "ClearAllForwardings=yes"],
        stream_compress="zstd", stream_compress_level=9, mbuffer=True, mbuffer_size="4M")])
    r2 = rebal_json("replicate", "w", config=good, )
    assert r2["outcome"] == "ok", r2
    assert not [n for n in r2["notes"] if "not installed" in n], r2["notes"]  # zstd and mbuffer on both ends
    same(d, f"{dst.name}/w")


def test_snapshot_ages_in_health_and_metrics(pools, backup_host, tmp_path):
    """Per dataset: never replicated (a child made after the run), and too old (the records made older,
    as days passing would)."""
    src, dst = pools
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    sh("zfs", "create", f"{d}/a")
    cfg = write_cfg(tmp_path, [backup_host.config_block(name="age", source=d, target=f"{dst.name}/c", recursive=True,
                                                        snapshot_max_age_hours=26)])
    assert rebal_json("replicate", "age", config=cfg)["outcome"] == "ok"
    h = json.loads(rebal("health", "--json", config=cfg, check=False).stdout)
    assert not [f for f in h["findings"] if f["subject"] == "job:age" and "dataset(s)" in f["message"]], h
    sh("zfs", "create", f"{d}/late")
    with sqlite3.connect(tmp_path / "state.db") as c:
        c.execute("UPDATE replica_points SET taken = taken - 30 * 3600 WHERE dataset = ?", (f"{d}/a",))
    h = json.loads(rebal("health", "--json", config=cfg, check=False).stdout)
    msgs = [f["message"] for f in h["findings"] if f["subject"] == "job:age"]
    assert any(f"1 dataset(s) never replicated: {d}/late" in m for m in msgs), msgs
    assert any("older than 26 h" in m and f"{d}/a (@" in m and f"{d} (" not in m for m in msgs), msgs
    m = rebal("metrics", config=cfg).stdout
    assert 'rebal_replication_datasets_never_replicated{replication_job="age"} 1' in m
    assert f'rebal_replication_dataset_snapshot_timestamp_seconds{{replication_job="age",dataset="{d}/a"}}' in m
    assert 'rebal_replication_snapshot_max_age_seconds{replication_job="age"} 93600' in m


def test_dry_run_text_says_what_is_in_and_out(pools, backup_host, tmp_path):
    src, dst = pools
    d = f"{src.name}/data"
    for ds in ("data", "data/keep", "data/tmp"):
        sh("zfs", "create", f"{src.name}/{ds}")
    cfg = write_cfg(tmp_path, [backup_host.config_block(name="t", source=d, target=f"{dst.name}/c", recursive=True,
                                                        exclude=["*/tmp"], pre_command=["/bin/true", "x"])])
    out = rebal("replicate", "t", "--dry-run", config=cfg).stdout
    assert f"  in:  {d}/keep -> {dst.name}/c/keep (full)" in out, out
    assert f"  out: {d}/tmp (exclude pattern '*/tmp')" in out, out
    assert "  pre_command: /bin/true x" in out, out
    assert not exists(f"{dst.name}/c") and not snaps(d), "a dry run changes nothing"


def test_rsync_job_with_excludes_keeps_the_copy_of_a_child_left_out(pools, backup_host, tmp_path):
    """rsync mode: a child left out is neither snapshot nor copied, and a child that becomes left out
    keeps its copy on the target (the parent's --delete never reaches into its directory)."""
    from fsenv import manifest

    src, dst = pools
    d = f"{src.name}/data"
    for ds in ("data", "data/a", "data/tmp"):
        sh("zfs", "create", f"{src.name}/{ds}")
        put(f"{src.name}/{ds}", "f", seed=len(ds))
    sh("zfs", "create", f"{dst.name}/files")
    target = os.path.join(mountpoint(f"{dst.name}/files"), "data")
    block = backup_host.config_block(name="rs", source=d, target=target, mode="rsync", recursive=True, exclude=["*/tmp"])
    cfg = write_cfg(tmp_path, [block])
    r1 = rebal_json("replicate", "rs", config=cfg)
    assert r1["outcome"] == "ok" and r1["excluded"] == [f"{d}/tmp (exclude pattern '*/tmp')"], r1
    assert r1["snapshot"] not in snaps(f"{d}/tmp") and r1["snapshot"] in snaps(f"{d}/a")
    assert not os.path.exists(os.path.join(target, "tmp", "f"))
    assert manifest(mountpoint(f"{d}/a")) == manifest(os.path.join(target, "a"))
    cfg = write_cfg(tmp_path, [block.replace('exclude = ["*/tmp"]', 'exclude = ["*/tmp", "*/a"]')])
    put(f"{d}/a", "g")
    r2 = rebal_json("replicate", "rs", config=cfg)
    assert r2["outcome"] == "ok", r2
    assert os.path.exists(os.path.join(target, "a", "f")), "the copy of a child left out is kept"
    assert not os.path.exists(os.path.join(target, "a", "g")), "and no longer updated"


def test_a_hook_that_hangs_is_ended_at_hook_timeout_and_a_missing_one_is_said(pools, backup_host, tmp_path):
    """A pre hook that outlives hook_timeout is ended (nothing of it left running) and fails the run
    before any snapshot; a hook program that does not exist fails it the same way, named; a post hook
    that hangs makes the run a warning, the data sent."""
    import subprocess
    import time

    src, dst = pools
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    put(d, "f")
    hang = ["/bin/sleep", "86.25"]  # an argument no other process has: found by pgrep below
    block = lambda **h: backup_host.config_block(name="hk", source=d, target=f"{dst.name}/copy",  # noqa: E731
                                                 hook_timeout=2, **h)
    before = snaps(d)
    t0 = time.monotonic()
    r = rebal("replicate", "hk", "--json", config=write_cfg(tmp_path, [block(pre_command=hang)]), check=False)
    took = time.monotonic() - t0
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["outcome"] == "failed" and "pre_command /bin/sleep" in out["error"], out
    assert took < 30, f"the run waited {took:.0f} s for a hook with a 2 s timeout"
    assert subprocess.run(["pgrep", "-f", "sleep 86.25"], capture_output=True).returncode == 1, "the hook lives on"
    assert snaps(d) == before, "no snapshot after a failed pre hook"

    r = rebal("replicate", "hk", "--json", config=write_cfg(tmp_path, [block(pre_command=["/no/such/hook"])]),
              check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 1 and "pre_command /no/such/hook" in out["error"], out
    assert "not" in out["error"].split("/no/such/hook", 1)[1], out["error"]  # not found / not installed
    assert snaps(d) == before

    r = rebal("replicate", "hk", "--json", config=write_cfg(tmp_path, [block(post_command=hang)]), check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["outcome"] == "warning", out
    assert any(w.startswith("post_command /bin/sleep") for w in out["warnings"]), out["warnings"]
    assert subprocess.run(["pgrep", "-f", "sleep 86.25"], capture_output=True).returncode == 1
    same(d, f"{dst.name}/copy")
