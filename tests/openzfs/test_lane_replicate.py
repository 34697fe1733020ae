"""Replication on real OpenZFS, over the guest's own sshd: holds, `receive -u`, a 1 GiB send killed
half way and resumed from its token (bytes counted), a stale token aborted once, diverged and
modified targets, rsync from `.zfs/snapshot`, restore and verify, and a growing dataset tree."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from lanelib import write_random
from replscenarios import (
    backup_root,
    cfg_for,
    fill,
    make_tree,
    mountpoint,
    snaps,
    tree_scenario,
)
from zfsenv import logging_shim, sh

pytestmark = pytest.mark.openzfs


@pytest.fixture
def pools(make_pool):
    src = make_pool([[], []], size="512M")
    dst = make_pool([[]], size="1G")
    make_tree(src)
    return src, dst


@pytest.fixture
def disk_pools(zfs_ready, tmp_path):
    """A source and a backup pool on the guest's virtio disks (2 GiB each), for the 1 GiB send."""
    from zfsenv import TestPool

    made = []
    for name, dev in ((f"lanesrc{os.getpid()}", "/dev/vdb"), (f"lanedst{os.getpid()}", "/dev/vdc")):
        mp = tmp_path / name
        sh("zpool", "create", "-f", "-m", str(mp), name, dev)
        made.append(TestPool(name, tmp_path, mp, []))
    sh("zfs", "create", f"{made[0].name}/data")
    yield made
    for p in made:
        p.destroy()
    for dev in ("/dev/vdb", "/dev/vdc"):
        sh("zpool", "labelclear", "-f", dev, check=False)


def holds(snap: str) -> set[str]:
    out = sh("zfs", "holds", "-H", snap).stdout
    return {line.split("\t")[1] for line in out.splitlines() if line.strip()}


def token(ds: str) -> str:
    r = sh("zfs", "get", "-H", "-o", "value", "receive_resume_token", ds, check=False)
    return r.stdout.strip() if r.returncode == 0 else "-"


def wait_for(pred, what: str, timeout: float = 120):
    """Wait for a state of the system (a token saved, a receive gone): bounded polling."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def receiving(target: str) -> bool:
    return subprocess.run(["pgrep", "-f", f"zfs receive .*{target}"], capture_output=True).returncode == 0


def progress_of_running(cfg) -> int:
    runs = rebal_json("runs", "--limit", "1", config=cfg)["runs"]
    return (runs[0]["progress"] or 0) if runs and runs[0]["outcome"] == "running" else 0


def pool_alloc(pool: str) -> int:
    return int(sh("zpool", "list", "-Hp", "-o", "alloc", pool).stdout.strip())


def kill_run_when(cfg, job: str, nbytes: int, synced_on: str | None = None) -> None:
    """Start `rebal replicate JOB` and SIGKILL it with its children once ``nbytes`` went through
    (counted by rebal on the sending side), or with ``synced_on`` (the receiving pool) once that pool
    holds ``nbytes`` more on disk: a receive saves its resumable state with each transaction group it
    commits, so only then is a token sure to be left behind by the cut."""
    base = pool_alloc(synced_on) if synced_on else 0
    p = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "replicate", job, "--json"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    if synced_on:
        wait_for(lambda: pool_alloc(synced_on) - base >= nbytes or p.poll() is not None,
                 f"{nbytes} bytes received and committed on {synced_on}")
    else:
        wait_for(lambda: progress_of_running(cfg) >= nbytes or p.poll() is not None, f"{nbytes} bytes sent")
    assert p.poll() is None, "the send ended before it could be cut"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def bookmarks(ds: str) -> list[str]:
    out = sh("zfs", "list", "-H", "-d", "1", "-t", "bookmark", "-o", "name", ds).stdout
    return [line.split("#", 1)[1] for line in out.splitlines() if "#" in line]


def test_full_then_incremental_from_a_bookmark_and_receive_u(pools, backup_host, tmp_path):
    """OpenZFS has bookmarks: the cursor is `ds#<snapshot>`, no rebal snapshot stays on the source
    (the default retention_source keeps none), nothing is held, and the next run sends `-i #bookmark`."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="night", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True)
    fill(src, 1)
    r1 = rebal_json("replicate", "night", config=cfg)
    assert r1["outcome"] == "ok" and {d["kind"] for d in r1["datasets"]} == {"full"}, r1
    assert {d["cursor"] for d in r1["datasets"]} == {"bookmark"}, r1
    assert not [n for n in r1["notes"] if "readonly=on" in n], "OpenZFS receives with -u"
    assert sh("zfs", "get", "-H", "-o", "value", "mounted", f"{dst.name}/copy").stdout.strip() == "no"
    assert sh("zfs", "get", "-H", "-o", "value", "readonly", f"{dst.name}/copy").stdout.strip() == "on"
    for ds in ("data", "data/child", "data/child/grandchild", "data/sibling"):
        assert bookmarks(f"{src.name}/{ds}") == [r1["snapshot"]], ds
        assert not [s for s in snaps(f"{src.name}/{ds}") if s.startswith("rebal-night-")], ds  # none pins data
    assert r1["snapshot"] in snaps(f"{dst.name}/copy")
    fill(src, 2)
    shim, calls = logging_shim(tmp_path, "zfs")
    r2 = json.loads(rebal("replicate", "night", "--json", config=cfg,
                          env={"PATH": f"{shim}:{os.environ['PATH']}"}).stdout)
    assert r2["outcome"] == "ok" and {d["kind"] for d in r2["datasets"]} == {"incremental"}, r2
    # the source's tree is listed once: after the run's snapshot only that snapshot is asked for
    listings = [c for c in calls.read_text().splitlines()
                if c.startswith("list -Hp -t all ") and c.endswith(f" {src.name}/data")]  # (not the selection's)
    assert any(c.startswith("get -Hp -o name,property,value guid,createtxg ") for c in calls.read_text().splitlines())
    assert len(listings) == 1, calls.read_text()
    assert {(d["base"], d["base_bookmark"]) for d in r2["datasets"]} == {(r1["snapshot"], True)}, r2
    assert bookmarks(f"{src.name}/data") == [r2["snapshot"]], "the old cursor bookmark is destroyed"
    assert f"{src.name}/data#{r1['snapshot']}" in r2["pruned_bookmarks"]
    assert manifest(mountpoint(f"{src.name}/data"), exclude=("child", "sibling")) == \
        manifest(backup_root(f"{dst.name}/copy"), exclude=("child", "sibling"))


@pytest.mark.lane_long  # CI's quick set verifies from bookmarks in its restore of a tree (retention_source 0)
def test_verify_from_a_bookmark_only_source_and_the_next_run_goes_on_from_its_point(pools, backup_host, tmp_path):
    """The common point is a bookmark only, so verify replicates once more, compares at that run's
    snapshot, and leaves the source as it found it: bookmarks only (issue 36: it compared nothing)."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="night", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True)
    fill(src, 1)
    r1 = rebal_json("replicate", "night", config=cfg)
    fill(src, 2)
    r2 = rebal_json("replicate", "night", config=cfg)
    assert {(d["base"], d["base_bookmark"]) for d in r2["datasets"]} == {(r1["snapshot"], True)}, r2
    v = json.loads(rebal("verify", "night", "--sample", "all", "--json", config=cfg).stdout)
    assert v["level"] == "OK" and any("replicated first" in n for n in v["notes"]), v
    assert v["snapshot"] not in (r1["snapshot"], r2["snapshot"]) and v["files"][0] == v["files"][1] > 0, v
    for ds in ("data", "data/child", "data/child/grandchild", "data/sibling"):
        assert not [s for s in snaps(f"{src.name}/{ds}") if s.startswith("rebal-night-")], ds  # none pins data
        assert bookmarks(f"{src.name}/{ds}") == [v["snapshot"]], ds  # the cursor moved to verify's point
    health = json.loads(rebal("health", "--json", config=cfg, check=False).stdout)
    assert not [f for f in health["findings"] if "never verified" in f["message"]], health
    r3 = rebal_json("replicate", "night", config=cfg)  # and the next run goes on from that bookmark
    assert r3["outcome"] == "ok" and {(d["base"], d["base_bookmark"]) for d in r3["datasets"]} == {(v["snapshot"], True)}


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_a_job_that_keeps_snapshots_holds_nothing_and_moves_to_bookmarks(pools, backup_host, tmp_path):
    """retention_source keeps the newest snapshot (for verify): still no hold, the cursor is the
    bookmark; destroying that snapshot by hand does not break the next incremental."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="keep", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  retention_source={"last": 1, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0})
    fill(src, 1)
    r1 = rebal_json("replicate", "keep", config=cfg)
    snap1 = f"{src.name}/data@{r1['snapshot']}"
    assert r1["outcome"] == "ok" and snaps(f"{src.name}/data").count(r1["snapshot"]) == 1
    assert holds(snap1) == set()
    sh("zfs", "destroy", snap1)  # an admin (or sanoid's pruning) removes it
    fill(src, 2)
    size = None
    r2 = rebal_json("replicate", "keep", config=cfg)
    [d] = r2["datasets"]
    assert r2["outcome"] == "ok" and d["kind"] == "incremental" and d["base_bookmark"], r2
    size = d["bytes"]
    assert 0 < size < 8 << 20, "an incremental, not a full send"
    v = json.loads(rebal("verify", "keep", "--sample", "all", "--json", config=cfg).stdout)
    assert v["level"] == "OK", v


@pytest.mark.lane_long
def test_1gib_send_killed_half_way_resumes_from_its_token(disk_pools, backup_host, tmp_path):
    src, dst = disk_pools
    sh("zfs", "set", "compression=off", f"{src.name}/data")
    cfg = cfg_for(tmp_path, backup_host, name="big", source=f"{src.name}/data", target=f"{dst.name}/copy")
    write_random(os.path.join(mountpoint(f"{src.name}/data"), "big.bin"), 1024)
    sh("zpool", "sync", src.name)
    kill_run_when(cfg, "big", 400 << 20)
    target = f"{dst.name}/copy"
    wait_for(lambda: not receiving(target), "the cut receive to end")
    assert token(target) not in ("-", ""), "zfs receive -s kept a resume token"
    r = rebal("replicate", "big", config=cfg)
    assert "resumed" in r.stdout and "of the" in r.stdout, r.stdout  # "resumed ..., sent X of the Y left"
    run = rebal_json("runs", "--job", "big", "--limit", "1", config=cfg)["runs"][0]
    d = run["details"]
    [res] = [x for x in d["datasets"] if x["kind"] == "resumed"]
    full = 1024 << 20
    assert 100 << 20 < res["bytes"] < 0.8 * full, res  # well under the full size: only the rest went
    assert res["expected"] and abs(res["bytes"] - res["expected"]) < 0.1 * res["expected"] + (8 << 20), res
    assert d["bytes"] >= res["bytes"] and run["outcome"] == "ok"
    assert token(target) in ("-", "")
    a = sh("sha256sum", os.path.join(mountpoint(f"{src.name}/data"), "big.bin")).stdout.split()[0]
    b = sh("sha256sum", os.path.join(backup_root(target), "big.bin")).stdout.split()[0]
    assert a == b


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_stale_token_is_aborted_once(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="st", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  bwlimit="6M")
    write_random(os.path.join(mountpoint(f"{src.name}/data"), "f.bin"), 80)
    # cut once the backup pool committed part of the stream (so a resumable state is on disk): cuts
    # timed by the bytes sent left no token in some lane runs (at 16 and at 40 MiB of 80: the receive
    # had not committed a transaction group yet). At 6 MB/s the 80 MiB take ~14 s.
    kill_run_when(cfg, "st", 24 << 20, synced_on=dst.name)
    target = f"{dst.name}/copy"
    wait_for(lambda: not receiving(target), "the cut receive to end")
    assert token(target) not in ("-", "")
    [cut] = [s for s in snaps(f"{src.name}/data") if s.startswith("rebal-st-")]
    sh("zfs", "destroy", f"{src.name}/data@{cut}")  # the token's snapshot is gone: it cannot resume
    r1 = rebal_json("replicate", "st", config=cfg)
    assert r1["outcome"] == "ok" and r1["aborted_tokens"] == [target], r1
    assert [d["kind"] for d in r1["datasets"]] == ["full"]
    r2 = rebal_json("replicate", "st", config=cfg)
    # (nothing was written since r1: OpenZFS lets the dataset sit the run out, unchanged)
    assert r2["outcome"] == "ok" and r2["aborted_tokens"] == [] and r2["datasets"][0]["kind"] in ("incremental", "unchanged")


@pytest.mark.lane_long  # the suite refuses a diverged target on zfs-fuse (test_replicate.py); CI's time
def test_diverged_and_modified_targets_fail_with_nothing_destroyed(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    fill(src, 1)
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    target = f"{dst.name}/copy"
    sh("zfs", "snapshot", f"{target}@made-on-the-backup")
    before = snaps(target)
    fill(src, 2)
    r = rebal("replicate", "j", "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 1 and "diverged" in out["error"] and "@made-on-the-backup" in out["error"], out
    assert snaps(target) == before
    sh("zfs", "destroy", f"{target}@made-on-the-backup")
    sh("zfs", "set", "readonly=off", target)  # rebal leaves replicas read-only: someone undid that
    with open(os.path.join(backup_root(target), "written-on-backup"), "w") as f:
        f.write("x")
    sh("zpool", "sync", dst.name)
    before = snaps(target)
    r = rebal("replicate", "j", "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 1 and "was written to" in out["error"], out
    assert snaps(target) == before and os.path.exists(os.path.join(mountpoint(target), "written-on-backup"))


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_rsync_reads_the_snapshot_directory(pools, backup_host, tmp_path):
    src, dst = pools
    target = os.path.join(mountpoint(dst.name), "files")
    cfg = cfg_for(tmp_path, backup_host, name="files", mode="rsync", source=f"{src.name}/data", target=target)
    fill(src, 1)
    r1 = rebal_json("replicate", "files", config=cfg)
    assert r1["outcome"] == "ok", r1
    assert not [n for n in r1.get("notes", []) if "clone" in n], "OpenZFS has .zfs/snapshot: no clone"
    kids = ("child", "sibling")
    assert manifest(mountpoint(f"{src.name}/data"), exclude=kids) == manifest(target, exclude=kids)
    fill(src, 2)
    r2 = rebal_json("replicate", "files", config=cfg)
    assert r2["outcome"] == "ok"
    assert manifest(mountpoint(f"{src.name}/data"), exclude=kids) == manifest(target, exclude=kids)


@pytest.mark.lane_long  # CI's time: the quick set restores in test_lane_restore and verifies in the bookmark test
def test_restore_and_verify_round_trip(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  retention_source={"last": 1})
    fill(src, 1)
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    v = rebal("verify", "j", "--sample", "all", "--json", config=cfg)
    assert json.loads(v.stdout)["level"] == "OK"
    out = rebal_json("restore", "j", "--to", f"{src.name}/restored", config=cfg)
    assert out["to"] == f"{src.name}/restored"
    kids = ("child", "sibling")
    assert manifest(mountpoint(f"{src.name}/data"), exclude=kids) == \
        manifest(backup_root(f"{src.name}/restored"), exclude=kids)


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_growing_tree_with_holds(pools, backup_host, tmp_path):
    tree_scenario(*pools, backup_host, tmp_path)


@pytest.mark.lane_long  # the suite runs the same scenario on zfs-fuse; the quick set restores on OpenZFS in test_lane_restore
def test_restore_a_path_in_child_datasets_of_a_recursive_job(pools, backup_host, tmp_path):
    """On OpenZFS the backup's children are received unmounted: the path is read from each one's
    snapshot all the same."""
    from replscenarios import restore_path_in_children_scenario

    src, dst = pools
    restore_path_in_children_scenario(src, dst, backup_host, tmp_path)


@pytest.mark.lane_long  # the suite counts the same commands on zfs-fuse (test_replicate.py)
def test_pruning_many_snapshots_takes_few_commands(pools, backup_host, tmp_path):
    """OpenZFS takes comma lists: 21 snapshots of 4 datasets pruned with one release, one
    `zfs destroy -r` on the source and one destroy per dataset on the backup (it was a release per
    snapshot and dataset, 84, and a destroy per snapshot, 21 on the source)."""
    from replscenarios import bulk_prune_scenario

    src, dst = pools
    got = bulk_prune_scenario(src, dst, backup_host, tmp_path, comma_lists=True)
    with open(os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl"), "a") as f:
        f.write(json.dumps({"test": "bulk prune", **got}) + "\n")


def test_a_snapshot_held_on_the_backup_keeps_only_itself(pools, backup_host, tmp_path):
    """OpenZFS destroys a comma list all or none: one snapshot held by someone else among 22 pruned
    at once stays alone, the others go, in a few commands (the list halved down to it)."""
    from replscenarios import held_among_many_scenario

    src, dst = pools
    got = held_among_many_scenario(src, dst, backup_host, tmp_path)
    with open(os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl"), "a") as f:
        f.write(json.dumps({"test": "held among many", **got}) + "\n")
