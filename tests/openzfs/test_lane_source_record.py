"""A no-change run on a tree, on real OpenZFS (issue 67's N=300 goal): once a no-change run has
listed the source and recorded each dataset's base with its `snapshots_changed`, the next no-change
run takes the bases from the record and does not list the source's snapshots; a snapshot made, or
the base destroyed, behind rebal's back moves `snapshots_changed` or `written@`, and that run lists
and does what the listing says (replicate/source_record.py)."""

import json
import sqlite3

import pytest
from conftest import rebal, rebal_json
from replscenarios import cfg_for
from treescenarios import touch
from zfsenv import sh

from rebal.replicate.source_record import key

pytestmark = pytest.mark.openzfs

JOB = "srec"
KIDS = ("a", "b", "c")


def record_of(tmp_path) -> dict | None:
    conn = sqlite3.connect(tmp_path / "state.db")
    try:
        row = conn.execute("SELECT value FROM kv WHERE key = ?", (key(JOB),)).fetchone()
    finally:
        conn.close()
    return json.loads(json.loads(row[0])["v"]) if row else None


def forge(tmp_path, rec: dict) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    row = json.loads(conn.execute("SELECT value FROM kv WHERE key = ?", (key(JOB),)).fetchone()[0])
    row["v"] = json.dumps(rec)
    conn.execute("UPDATE kv SET value = ? WHERE key = ?", (json.dumps(row), key(JOB)))
    conn.commit()
    conn.close()


def snapshots_changed(ds: str) -> int:
    return int(sh("zfs", "get", "-Hp", "-o", "value", "snapshots_changed", ds).stdout.strip())


@pytest.fixture
def recorded(make_pool, backup_host, tmp_path):
    """A tree of four datasets sent whole, then no-change runs until one has recorded the source's
    bases (a value within two seconds of its reading is not recorded: at most a few runs)."""
    src, dst = make_pool([[]], size="512M"), make_pool([[]], size="512M")
    root = f"{src.name}/t"
    sh("zfs", "create", "-o", "atime=off", root)
    for k in KIDS:
        sh("zfs", "create", f"{root}/{k}")
        touch(f"{root}/{k}")
    cfg = cfg_for(tmp_path, backup_host, name=JOB, source=root, target=f"{dst.name}/t", recursive=True)
    assert rebal_json("replicate", JOB, config=cfg)["outcome"] == "ok"
    listed = None
    for _ in range(4):
        r = rebal_json("replicate", JOB, config=cfg)
        assert r["outcome"] == "ok" and {d["kind"] for d in r["datasets"]} == {"unchanged"}, r
        assert r["source_recorded"] == 0, r  # no record yet: this run listed the source
        listed = r
        if record_of(tmp_path) is not None:
            break
    rec = record_of(tmp_path)
    assert rec is not None, "no no-change run recorded the source's bases"
    datasets = [root] + [f"{root}/{k}" for k in KIDS]
    assert sorted(rec["marks"]) == datasets and all(rec["marks"][d] == snapshots_changed(d) for d in datasets)
    return root, cfg, listed


def test_the_next_no_change_run_takes_the_bases_from_the_record_without_listing(recorded):
    root, cfg, listed = recorded
    r = rebal_json("replicate", JOB, config=cfg)
    assert r["outcome"] == "ok" and r["source_recorded"] == 4, r
    assert {d["kind"] for d in r["datasets"]} == {"unchanged"} and r["backup_asked"] == "bases", r
    assert r["local_commands"] < listed["local_commands"], (r["local_commands"], listed["local_commands"])
    # a snapshot of the admin's on one dataset moves its snapshots_changed: the source is listed again
    sh("zfs", "snapshot", f"{root}/a@by-hand")
    r = rebal_json("replicate", JOB, config=cfg)
    assert r["source_recorded"] == 0 and {d["kind"] for d in r["datasets"]} == {"unchanged"}, r
    # something written: the run lists and sends that dataset alone
    touch(f"{root}/b")
    r = rebal_json("replicate", JOB, config=cfg)
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert r["source_recorded"] == 0 and kinds[f"{root}/b"] == "incremental", kinds
    assert [k for d, k in kinds.items() if d != f"{root}/b"] == ["unchanged"] * 3, kinds


@pytest.mark.lane_long  # a minute and a half under TCG; the quick set takes the record's way above
def test_a_base_destroyed_in_the_second_the_record_cannot_see_is_not_taken_for_unchanged(recorded, tmp_path):
    """The one thing the marks cannot see: a change in the same second as their reading. Played by
    destroying a dataset's base on the source (a snapshot, or the bookmark that stands for it) and
    writing its new `snapshots_changed` into the record: `written@`/`written#` of a base that is
    gone answers nothing, the run lists, and the dataset is not reported unchanged on the record's
    word."""
    root, cfg, _ = recorded
    rec = record_of(tmp_path)
    ds = f"{root}/c"
    name, _, _, bookmark = rec["bases"][ds]  # the base may be a bookmark (the source's cursor)
    sh("zfs", "destroy", f"{ds}{'#' if bookmark else '@'}{name}")
    rec["marks"][ds] = snapshots_changed(ds)
    forge(tmp_path, rec)
    r = json.loads(rebal("replicate", JOB, "--json", config=cfg, check=False).stdout)
    assert r["source_recorded"] == 0, r
    kinds = {d["source"]: d["kind"] for d in r["datasets"]}
    assert kinds.get(ds) != "unchanged", r

