"""A changed run on a backup dataset of many snapshots, on real OpenZFS (issue 67): after the run
that adopts it, the next changed run takes the backup's snapshots from rebal's record (its
`snapshots_changed` unchanged) and lists none of them; anything done to them behind rebal's back
shows in `snapshots_changed`, and that run lists them again; a snapshot gone from the backup in the
second the record cannot see is never what the source's prune trusts (replicate/backup_record.py)."""

import json
import sqlite3
import subprocess

import pytest
from conftest import rebal, rebal_json
from replscenarios import cfg_for
from setupscenarios import same
from treescenarios import touch
from zfsenv import sh

from rebal.replicate.backup_record import MANY, key

pytestmark = pytest.mark.openzfs

JOB = "rec"


def names_on(ds: str) -> list[str]:
    out = sh("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-s", "createtxg", "-d", "1", ds).stdout.split()
    return [n.split("@", 1)[1] for n in out]


def record_of(tmp_path, target: str) -> dict | None:
    conn = sqlite3.connect(tmp_path / "state.db")
    try:
        row = conn.execute("SELECT value FROM kv WHERE key = ?", (key(JOB, target),)).fetchone()
    finally:
        conn.close()
    return json.loads(json.loads(row[0])["v"]) if row else None


def snapshots_changed(ds: str) -> int:
    return int(sh("zfs", "get", "-Hp", "-o", "value", "snapshots_changed", ds).stdout.strip())


@pytest.fixture
def adopted(make_pool, backup_host, tmp_path):
    """A dataset with MANY + 8 of the job's snapshots (one a transaction group, an hour apart by
    their names), its backup a copy of them all (`zfs send -R`), and the run that adopts it."""
    src, dst = make_pool([[]], size="1G"), make_pool([[]], size="1G")
    ds, target = f"{src.name}/d", f"{dst.name}/d"
    sh("zfs", "create", "-o", "atime=off", ds)
    for i in range(MANY + 8):
        touch(ds)
        sh("zfs", "snapshot", f"{ds}@rebal-{JOB}-202601{1 + i // 24:02d}T{i % 24:02d}0000Z")
    send = subprocess.Popen(["zfs", "send", "-R", f"{ds}@{names_on(ds)[-1]}"], stdout=subprocess.PIPE)
    recv = subprocess.run(["zfs", "receive", "-u", target], stdin=send.stdout, capture_output=True, text=True,
                          check=False)
    send.stdout.close()
    assert send.wait() == 0 and recv.returncode == 0, recv.stderr
    cfg = cfg_for(tmp_path, backup_host, name=JOB, source=ds, target=target,
                  retention_source={"last": MANY + 4}, retention_target={"last": MANY + 4})
    touch(ds)
    first = rebal_json("replicate", JOB, config=cfg)
    assert first["outcome"] == "ok" and first["backup_asked"] == "whole", first  # no record yet: listed
    rec = record_of(tmp_path, target)
    assert rec is not None and [s[0] for s in rec["snaps"]] == names_on(target), rec
    assert rec["changed"] == snapshots_changed(target)
    return ds, target, cfg


def test_the_next_changed_run_takes_the_backup_from_the_record_and_lists_none_of_it(adopted, tmp_path):
    ds, target, cfg = adopted
    touch(ds)
    r = rebal_json("replicate", JOB, config=cfg)
    assert r["outcome"] == "ok" and r["datasets"][0]["kind"] == "incremental", r
    assert r["backup_asked"] == "part" and r["backup_recorded"] == 1 and r["backup_listed"] == 0, r
    assert r["pruned_target"] and r["pruned_source"], r  # retention ran on what the record said
    same(ds, target)
    # the record as this run left it is what the backup really holds, snapshot for snapshot
    rec = record_of(tmp_path, target)
    real = sh("zfs", "list", "-Hp", "-o", "name,guid", "-t", "snapshot", "-s", "createtxg", "-d", "1", target).stdout
    assert [(s[0], s[1]) for s in rec["snaps"]] == [(n.split("@")[1], int(g)) for n, g in
                                                    (ln.split("\t") for ln in real.splitlines())]
    assert rec["changed"] == snapshots_changed(target)
    assert len(rec["snaps"]) == MANY + 4


@pytest.mark.lane_long  # each a minute under TCG; the quick set's two tests take the record's way and its guard
@pytest.mark.parametrize("behind", ["destroy", "rename", "snapshot"])
def test_a_change_behind_rebals_back_is_seen_and_the_backup_listed(adopted, tmp_path, behind):
    """Whatever changes the backup's snapshots in a later second moves `snapshots_changed`: the
    record does not stand, the dataset is listed, the run does what a listing says."""
    ds, target, cfg = adopted
    old = names_on(target)
    before = snapshots_changed(target)
    # a second later than the record's read (snapshots_changed counts seconds): seen by the next read
    sh("sleep", "1.1")
    if behind == "destroy":
        sh("zfs", "destroy", f"{target}@{old[3]}")
    elif behind == "rename":
        sh("zfs", "rename", f"{target}@{old[3]}", f"{target}@renamed-by-hand")
    else:
        sh("zfs", "snapshot", f"{target}@made-by-hand")
    assert snapshots_changed(target) > before
    touch(ds)
    r = json.loads(rebal("replicate", JOB, "--json", config=cfg, check=False).stdout)
    assert r["backup_recorded"] == 0 and r["backup_listed"] == 1, r
    if behind == "snapshot":  # the backup moved on behind rebal: refused as it was before records
        assert r["outcome"] == "failed", r
        assert record_of(tmp_path, target) is None  # forgotten before the send: listed next time too
    else:
        assert r["outcome"] == "ok", r
        same(ds, target)


def test_a_snapshot_gone_from_the_backup_unseen_by_the_record_is_kept_on_the_source(adopted, tmp_path):
    """The one thing a record cannot see: another actor's change in the same second as rebal's read.
    Played here by destroying a snapshot on the backup and writing its new `snapshots_changed` into
    the record. The source's retention would prune that snapshot there (the backup has it, says the
    record): it is asked of the backup by name and guid first, and kept."""
    ds, target, cfg = adopted
    doomed = names_on(target)[0]  # the oldest: the next run's retention prunes it on both sides
    sh("zfs", "destroy", f"{target}@{doomed}")
    conn = sqlite3.connect(tmp_path / "state.db")
    row = json.loads(conn.execute("SELECT value FROM kv WHERE key = ?", (key(JOB, target),)).fetchone()[0])
    rec = json.loads(row["v"])
    rec["changed"] = snapshots_changed(target)  # the change the record's one-second granularity hides
    row["v"] = json.dumps(rec)
    conn.execute("UPDATE kv SET value = ? WHERE key = ?", (json.dumps(row), key(JOB, target)))
    conn.commit()
    conn.close()
    touch(ds)
    r = rebal_json("replicate", JOB, config=cfg)
    assert r["outcome"] == "ok" and r["backup_recorded"] == 1, r
    assert doomed in names_on(ds), "the source pruned a snapshot the backup no longer has"
    assert doomed not in r["pruned_source"]
    assert [x for x in r["notes"] if "no longer holds them" in x], r["notes"]
    same(ds, target)
    # the backup's retention met the missing snapshot (its destroy found nothing): the record the
    # run leaves is what the backup holds again
    rec = record_of(tmp_path, target)
    assert rec is not None and [s[0] for s in rec["snaps"]] == names_on(target), (rec, names_on(target))
