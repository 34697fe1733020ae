"""rebal's record of a backup dataset's snapshots (replicate/backup_record.py): trusted only while
the backup's `snapshots_changed` says what it said after the run's last change there, with no
resume token; forgotten before a send; never what the source's prune stands on unchecked.
A real SQLite state (the kv table); the backup host a stand-in that answers as OpenZFS does."""

import json
import sqlite3
from types import SimpleNamespace

import pytest

from rebal import state
from rebal.replicate import backup_record as R
from rebal.replicate.policy import Snap
from rebal.replicate.zfs_run import DatasetReport, Job, ZfsReport

T = "backup/d"


class Backup:
    """`snapshots_changed` and tokens by dataset, guids by snapshot name; what it was asked."""

    def __init__(self, changed: int | None = 1765000000, token: str = "", guids: dict | None = None) -> None:
        self.changed, self.token, self.held = changed, token, guids or {}
        self.asked: list[tuple[str, list[str]]] = []

    def snapshot_marks(self, datasets):
        self.asked.append(("marks", list(datasets)))
        if self.changed is None:
            return None  # no such property on this zfs
        return {d: (self.changed, self.token) for d in datasets}

    def guids(self, names):
        self.asked.append(("guids", list(names)))
        return {n: g for n, g in self.held.items() if n in names}


@pytest.fixture
def cache(tmp_path):
    conn = state.connect(tmp_path / "state.db")
    yield state.Cache(conn)
    conn.close()


def rep_of(cache, backup, tree=None, datasets=()):
    return SimpleNamespace(job=Job("j", "tank/d", T), cache=cache, target=backup, dry_run=False, recorded={},
                           may_skip=lambda: True,
                           target_tree=tree or {}, report=ZfsReport(datasets=list(datasets)),
                           target_of=lambda ds: "backup/d" + ds[len("tank/d"):])


def many(n=R.MANY):
    return [Snap(f"rebal-j-2026110{i % 9 + 1}T{i:06d}Z", 1000 + i, 10 + i) for i in range(n)]


def test_a_record_is_made_after_a_send_and_stands_while_snapshots_changed_says_the_same(cache):
    snaps = many()
    rep = rep_of(cache, Backup(), {T: snaps}, [DatasetReport("tank/d", T, "incremental")])
    assert R.keep(rep) == 1
    nxt = rep_of(cache, Backup())
    assert R.from_record(nxt, [T]) == {T: snaps}
    assert T in nxt.recorded
    assert nxt.target.asked == [("marks", [T])]  # one question, no listing


@pytest.mark.parametrize("backup", [Backup(changed=1765000001), Backup(token="1-abc-def"), Backup(changed=None)],
                         ids=["snapshots changed since", "a cut receive's token", "no snapshots_changed"])
def test_a_record_does_not_stand_when_the_backup_answers_otherwise(cache, backup):
    R.keep(rep_of(cache, Backup(), {T: many()}, [DatasetReport("tank/d", T, "incremental")]))
    nxt = rep_of(cache, backup)
    assert R.from_record(nxt, [T]) == {}
    assert nxt.recorded == {}


def test_no_record_of_a_small_dataset_a_failed_send_a_token_or_a_dry_run(cache):
    assert R.keep(rep_of(cache, Backup(), {T: many(R.MANY - 1)}, [DatasetReport("tank/d", T, "incremental")])) == 0
    assert R.keep(rep_of(cache, Backup(), {T: many()}, [DatasetReport("tank/d", T, "failed")])) == 0
    assert R.keep(rep_of(cache, Backup(token="1-x"), {T: many()}, [DatasetReport("tank/d", T, "full")])) == 0
    dry = rep_of(cache, Backup(), {T: many()}, [DatasetReport("tank/d", T, "full")])
    dry.dry_run = True
    assert R.keep(dry) == 0
    assert cache.get(R.key("j", T)) is None


def test_a_record_is_forgotten_before_a_send_so_a_cut_run_leaves_none(cache):
    R.keep(rep_of(cache, Backup(), {T: many()}, [DatasetReport("tank/d", T, "incremental")]))
    R.forget(rep_of(cache, Backup()), [T])
    assert R.from_record(rep_of(cache, Backup()), [T]) == {}


def test_a_record_older_than_relist_is_not_used_and_its_age_is_carried_from_the_listing(cache):
    R.keep(rep_of(cache, Backup(), {T: many()}, [DatasetReport("tank/d", T, "incremental")]))
    rec = json.loads(cache.get(R.key("j", T)))
    rec["listed"] -= R.RELIST + 60  # its listing, over a week ago, carried through every run since
    cache.set(R.key("j", T), json.dumps(rec))
    assert R.from_record(rep_of(cache, Backup()), [T]) == {}
    # a run from a record writes the record's own listing time again, not now
    rec["listed"] += 120
    cache.set(R.key("j", T), json.dumps(rec))
    nxt = rep_of(cache, Backup(), datasets=[DatasetReport("tank/d", T, "incremental")])
    nxt.target_tree = R.from_record(nxt, [T])
    R.keep(nxt)
    assert json.loads(cache.get(R.key("j", T)))["listed"] == rec["listed"]


def test_the_source_prunes_only_what_the_backup_still_holds_by_guid_where_a_record_stood(cache):
    """A snapshot destroyed on the backup behind the record (in the second of its read): the source
    keeps its copy; a dataset whose backup was listed is not asked."""
    snaps = many()
    old, gone = snaps[0], snaps[1]
    backup = Backup(guids={f"{T}@{old.name}": old.guid})  # gone is no longer there
    rep = rep_of(cache, backup)
    rep.recorded = {T: 0.0}
    drops = {"tank/d": [old.name, gone.name], "tank/d/listed": ["x"]}
    guid_of = {"tank/d": {s.name: s.guid for s in snaps}, "tank/d/listed": {"x": 5}}
    assert R.confirmed(rep, drops, guid_of) == {"tank/d": [old.name], "tank/d/listed": ["x"]}
    assert backup.asked == [("guids", sorted([f"{T}@{old.name}", f"{T}@{gone.name}"]))]
    assert "no longer holds them" in rep.report.notes[0]


def test_a_snapshot_of_another_guid_by_the_same_name_is_not_pruned_at_the_source(cache):
    snaps = many()
    rep = rep_of(cache, Backup(guids={f"{T}@{snaps[0].name}": 999}))
    rep.recorded = {T: 0.0}
    assert R.confirmed(rep, {"tank/d": [snaps[0].name]}, {"tank/d": {snaps[0].name: snaps[0].guid}}) == {}
    # a name neither side can give a guid for is no proof either
    assert R.confirmed(rep, {"tank/d": [snaps[1].name]}, {"tank/d": {}}) == {}


def test_a_record_that_is_not_json_is_no_record(cache):
    cache.set(R.key("j", T), "{not json")
    assert R.from_record(rep_of(cache, Backup()), [T]) == {}


def test_the_kv_table_keeps_a_record_of_ten_thousand_snapshots(cache, tmp_path):
    snaps = many(10_000)
    R.keep(rep_of(cache, Backup(), {T: snaps}, [DatasetReport("tank/d", T, "incremental")]))
    assert R.from_record(rep_of(cache, Backup()), [T])[T] == snaps
    size = sqlite3.connect(tmp_path / "state.db").execute("SELECT length(value) FROM kv WHERE key = ?",
                                                          (R.key("j", T),)).fetchone()[0]
    assert size < 600_000  # about 50 bytes a snapshot
