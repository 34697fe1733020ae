"""Replication of trees on real OpenZFS (issue 38): the remote round trips of a run do not grow with
the number of unchanged datasets, and a SIGKILL in the middle of parallel sends leaves resumable
receives that the next run resumes, every one of them."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import rebal_json
from lanelib import write_random
from replscenarios import cfg_for, mountpoint
from setupscenarios import same
from treescenarios import make_wide_tree, touch
from zfsenv import sh

pytestmark = pytest.mark.openzfs


@pytest.mark.lane_long  # 100 s under TCG; the suite counts the same round trips on zfs-fuse (test_replicate.py)
def test_round_trips_do_not_grow_with_unchanged_datasets(make_pool, backup_host, tmp_path):
    """A run with nothing new costs the same remote commands for 4 datasets as for 40, and takes no
    snapshot: one, which asks the backup for every base at once. One changed dataset adds its part of
    the backup's listing (its own snapshots, and whether its parent is there) and its one stream,
    whatever the size of the tree."""
    src, dst = make_pool([[]], size="1G"), make_pool([[]], size="1G")
    counts = {}
    for n in (4, 40):
        kids = make_wide_tree(src.name, n, root=f"t{n}")
        (tmp_path / f"n{n}").mkdir()
        job = dict(name=f"t{n}", source=f"{src.name}/t{n}", target=f"{dst.name}/t{n}", recursive=True)
        cfg = cfg_for(tmp_path / f"n{n}", backup_host, **job)
        full = rebal_json("replicate", f"t{n}", config=cfg)
        assert full["outcome"] == "ok" and len(full["datasets"]) == n + 1, full
        assert full["backup_asked"] == "whole", full  # no record yet
        assert not [x for x in full["notes"] if "readonly=on" in x]  # received read-only: no set after
        idle = rebal_json("replicate", f"t{n}", config=cfg)
        assert idle["outcome"] == "ok" and idle["snapshot"] == "", idle
        assert {d["kind"] for d in idle["datasets"]} == {"unchanged"} and len(idle["datasets"]) == n + 1
        assert idle["backup_asked"] == "bases", idle
        assert [x for x in idle["notes"] if "the backup still holds every base" in x], idle["notes"]
        touch(kids[1])
        one = rebal_json("replicate", f"t{n}", config=cfg)
        kinds = {d["source"]: d["kind"] for d in one["datasets"]}
        assert kinds.pop(kids[1]) == "incremental" and set(kinds.values()) == {"unchanged"}, one
        assert one["backup_asked"] == "part" and one["backup_listed"] == 2, one  # the child and the root
        same(kids[1], f"{dst.name}/t{n}/{kids[1].rsplit('/', 1)[1]}")
        counts[n] = (full["remote_commands"], idle["remote_commands"], one["remote_commands"],
                     idle["local_commands"], one["local_commands"])
    print("remote commands (full, no change, one changed) and local (no change, one changed):", counts)
    assert counts[4][1] == counts[40][1] == 1, counts  # the bases, all in one command
    # + the part's listing, its resume tokens and whether its parent is there (three commands, side
    # by side) and the one stream
    assert counts[4][2] == counts[40][2] == 5, counts
    assert counts[4][3:] == counts[40][3:], counts  # local: constant too
    assert counts[40][0] - counts[4][0] == 36, counts  # a full run: one stream per dataset, nothing else


def test_the_record_stands_only_while_the_source_and_the_backup_agree(make_pool, backup_host, tmp_path):
    """The record of what landed stands in for listing the backup only where every dataset's newest
    point of the job is the one that landed, nothing was written since, and the backup still holds
    that base (asked every run, in one command). A snapshot left by a cut run, or a new dataset: that
    part of the backup is listed and sent. A backup destroyed or rolled back behind rebal's back: the
    very next run says so, lists the backup and sends what it lacks."""
    src, dst = make_pool([[]], size="1G"), make_pool([[]], size="1G")
    kids = make_wide_tree(src.name, 3, root="r")
    # the test reads the source to compare it with the backup: with atime on, that read is a write
    # (the access times), and the next run would rightly send it
    sh("zfs", "set", "atime=off", f"{src.name}/r")
    job = dict(name="r", source=f"{src.name}/r", target=f"{dst.name}/r", recursive=True,
               retention_source={"last": 10}, retention_target={"last": 10})  # older bases on both sides
    cfg = cfg_for(tmp_path, backup_host, **job)
    assert rebal_json("replicate", "r", config=cfg)["outcome"] == "ok"
    # a run cut after its snapshot: a write, the job's snapshot of that dataset, nothing sent. The
    # newest point is not the one that landed: the next run lists that part of the backup, sends it
    touch(kids[1])
    sh("zfs", "snapshot", f"{kids[1]}@rebal-r-20260101T000000Z")
    r = rebal_json("replicate", "r", config=cfg)
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert r["backup_asked"] == "part" and r["backup_listed"] == 2, r
    assert kinds.pop(kids[1]) == "incremental" and set(kinds.values()) == {"unchanged"}, r
    same(kids[1], f"{dst.name}/r/{kids[1].rsplit('/', 1)[1]}")
    # a new dataset: no record for it, its part listed (it is not there), sent in full
    sh("zfs", "create", f"{src.name}/r/new")
    r = rebal_json("replicate", "r", config=cfg)
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert kinds[f"{src.name}/r/new"] == "full" and r["backup_asked"] == "part", r
    idle = rebal_json("replicate", "r", config=cfg)
    assert idle["remote_commands"] == 1 and idle["backup_asked"] == "bases", idle
    assert {d["kind"] for d in idle["datasets"]} == {"unchanged"}, idle
    # the backup of one dataset destroyed behind rebal's back: the very next run finds it and sends
    # it in full
    gone = f"{dst.name}/r/{kids[0].rsplit('/', 1)[1]}"
    sh("zfs", "destroy", "-r", gone)
    r = rebal_json("replicate", "r", config=cfg)
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert [x for x in r["notes"] if "no longer holds 1 base" in x and gone in x], r["notes"]
    assert r["outcome"] == "ok" and kinds[kids[0]] == "full" and r["backup_asked"] == "whole", r
    same(kids[0], gone)
    # one rolled back behind rebal's back, to the snapshot before its newest: found by the very next
    # run, which sends it on from the older base both sides still have
    back = f"{dst.name}/r/{kids[2].rsplit('/', 1)[1]}"
    older = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-s", "createtxg", back).stdout.split()
    touch(kids[2])
    assert rebal_json("replicate", "r", config=cfg)["outcome"] == "ok"
    newest = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-s", "createtxg", back).stdout.split()[-1]
    assert newest not in older, (older, newest)
    sh("zfs", "rollback", "-r", older[-1])
    r = rebal_json("replicate", "r", config=cfg)
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert [x for x in r["notes"] if "no longer holds 1 base" in x and newest in x], r["notes"]
    assert r["outcome"] == "ok" and kinds[kids[2]] == "incremental", r
    same(kids[2], back)
    idle = rebal_json("replicate", "r", config=cfg)
    assert idle["remote_commands"] == 1 and {d["kind"] for d in idle["datasets"]} == {"unchanged"}, idle


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_sigkill_mid_run_resumes_every_partial_receive(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="2G"), make_pool([[]], size="2G")
    sh("zfs", "create", f"{src.name}/big")
    kids = []
    for i in range(6):
        ds = f"{src.name}/big/d{i}"
        sh("zfs", "create", ds)
        write_random(os.path.join(mountpoint(ds), "data"), 64, seed=i)
        kids.append(ds)
    sh("zpool", "sync", src.name)
    cfg = cfg_for(tmp_path, backup_host, name="big", source=f"{src.name}/big", target=f"{dst.name}/big",
                  recursive=True, parallel=6, bwlimit="8M")  # slow enough to be caught mid-stream
    p = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "replicate", "big", "--json"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def receiving() -> int:
        return len([line for line in subprocess.run(["pgrep", "-af", "zfs receive"], capture_output=True,
                                                    text=True).stdout.splitlines() if f"{dst.name}/big/d" in line])

    def tokens() -> dict:
        out = sh("zfs", "get", "-H", "-r", "-o", "name,value", "receive_resume_token", f"{dst.name}/big",
                 check=False).stdout
        return {ln.split("\t")[0]: ln.split("\t")[1] for ln in out.splitlines() if ln.split("\t")[1] not in ("-", "")}

    deadline = time.monotonic() + 300
    base = int(sh("zpool", "list", "-Hp", "-o", "alloc", dst.name).stdout)
    # every child's stream under way, and some of each committed on the backup pool; the 384 MiB take
    # 48 s at 8 MB/s, the 100 MiB 13 s: a loaded machine's slow polling still kills mid-stream (at
    # 12 MB/s and 150 MiB, one run under three guests' load saw every stream end before the kill)
    while receiving() < 6 or int(sh("zpool", "list", "-Hp", "-o", "alloc", dst.name).stdout) - base < 100 << 20:
        assert p.poll() is None and time.monotonic() < deadline, "the sends ended before they could be cut"
        time.sleep(0.5)  # polling the system's state, bounded
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 120
    while receiving():
        assert time.monotonic() < deadline, "receives still running after the kill"
        time.sleep(0.5)
    cut = tokens()
    assert len(cut) >= 2, cut  # (a stream that ended before the kill leaves none)
    r = rebal_json("replicate", "big", config=cfg)
    assert r["outcome"] == "ok", r
    resumed = {d["target"] for d in r["datasets"] if d["kind"] == "resumed"}
    assert resumed == set(cut), (resumed, cut)
    assert not tokens()
    for ds in kids:
        same(ds, f"{dst.name}/big/{ds.rsplit('/', 1)[1]}")


@pytest.mark.lane_alone  # sets zfs_txg_timeout, which every pool in the guest shares
def test_a_write_not_yet_synced_is_not_taken_for_unchanged(make_pool, backup_host, tmp_path):
    """`written@` counts only synced transaction groups: a file written just before a run is dirty in
    memory, the property says 0. With the txg held open for two minutes, a run right after the write
    still sends it (rebal syncs the pool before it reads `written`)."""
    src, dst = make_pool([[]], size="1G"), make_pool([[]], size="1G")
    kids = make_wide_tree(src.name, 2, root="w")
    cfg = cfg_for(tmp_path, backup_host, name="w", source=f"{src.name}/w", target=f"{dst.name}/w", recursive=True)
    first = rebal_json("replicate", "w", config=cfg)
    assert first["outcome"] == "ok"
    # what rebal reads: written since the job's cursor (a bookmark here: the snapshot itself is gone,
    # and `written` alone, counted from the newest snapshot, would be the whole dataset)
    [cursor] = {d["cursor"] for d in first["datasets"]}
    prop = ("written#" if cursor == "bookmark" else "written@") + first["snapshot"]
    knob = "/sys/module/zfs/parameters/zfs_txg_timeout"
    with open(knob) as f:
        was = f.read().strip()
    try:
        with open(knob, "w") as f:
            f.write("120")
        sh("zpool", "sync", src.name)  # a fresh txg, open for two minutes
        touch(kids[0], name="just-now")
        unsynced = sh("zfs", "get", "-Hp", "-o", "value", prop, kids[0]).stdout.strip()
        # the precondition the test stands on: the write is not yet counted, so a run that trusted
        # `written` without syncing first would call the dataset unchanged
        assert unsynced == "0", f"{prop} was {unsynced} before the sync: the test proves nothing"
        r = rebal_json("replicate", "w", config=cfg)
    finally:
        with open(knob, "w") as f:
            f.write(was)
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert r["outcome"] == "ok" and kinds.pop(kids[0]) == "incremental" and set(kinds.values()) == {"unchanged"}, (unsynced, r)
    same(kids[0], f"{dst.name}/w/{kids[0].rsplit('/', 1)[1]}")
