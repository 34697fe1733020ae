"""rebal's record of the source's bases (replicate/source_record.py): a no-change run that listed the
source records each dataset's base with its `snapshots_changed` read before the listing; the next
no-change run takes the bases from it, with no listing, only while every value is the same, the
base is what landed, nothing was written since and the backup holds every base by guid. A real
SQLite state; the source a stand-in answering as OpenZFS does (the lane runs the same on OpenZFS:
tests/openzfs/test_lane_source_record.py)."""

import json
import time
from types import SimpleNamespace

import pytest

from rebal import state
from rebal.errors import HostError
from rebal.replicate import source_record as SR
from rebal.replicate.policy import Snap
from rebal.replicate.select import Selection
from rebal.replicate.unchanged import first_questions
from rebal.replicate.zfs_run import Job, ZfsReport

SNAP = "rebal-j-20261207T120000Z"
DATASETS = ["tank/d", "tank/d/a"]
OLD = int(time.time()) - 3600  # a `snapshots_changed` of an hour ago


class Source:
    """OpenZFS as the run sees it: what was written since each base, each dataset's
    `snapshots_changed`; the commands it was asked, in order."""

    def __init__(self, changed=OLD, written=0, has_property=True) -> None:
        self.changed = {ds: changed for ds in DATASETS}
        self.written, self.has_property = written, has_property
        self.marks_fail = False
        self.calls: list[str] = []

    def sync(self, pool):
        self.calls.append("sync")
        return True

    def choices_written(self, source, recursive, props):
        self.calls.append("choices_written" + (" +snapshots_changed" if SR.PROPERTY in props else ""))
        if SR.PROPERTY in props and not self.has_property:
            return None
        written = {(ds, f"written@{SNAP}"): self.written for ds in DATASETS}
        written.update({(ds, SR.PROPERTY): v for ds, v in self.changed.items() if SR.PROPERTY in props})
        return [(ds, "-") for ds in DATASETS], written

    def backup_choices(self, source, recursive):
        self.calls.append("backup_choices")
        return [(ds, "-") for ds in DATASETS]

    def written_since(self, source, recursive, props):
        self.calls.append("written_since")
        return {(ds, f"written@{SNAP}"): self.written for ds in DATASETS}

    def snapshot_marks(self, datasets):
        self.calls.append("snapshot_marks")
        if self.marks_fail:
            raise HostError("localhost: cannot open 'tank/d/a': dataset does not exist")
        return {ds: (self.changed[ds], "") for ds in datasets} if self.has_property else None

    def listing(self, root, recursive):
        self.calls.append("listing")
        return {"tank/d": [Snap("older", 9, 3), Snap(SNAP, 11, 5)], "tank/d/a": [Snap(SNAP, 12, 5)]}


@pytest.fixture
def cache(tmp_path):
    conn = state.connect(tmp_path / "state.db")
    yield state.Cache(conn)
    conn.close()


def run(cache, src, guids=None, pull=False, dry_run=False):
    held = guids if guids is not None else {"backup/d@" + SNAP: 11, "backup/d/a@" + SNAP: 12}
    rep = SimpleNamespace(job=Job("j", "tank/d", "backup/d", recursive=True, pull=pull), landed=dict.fromkeys(DATASETS, SNAP),
                          source=src, target=SimpleNamespace(guids=lambda names: held), report=ZfsReport(),
                          selection=Selection("tank/d"), cache=cache, dry_run=dry_run,
                          target_of=lambda ds: "backup/d" + ds[len("tank/d"):])
    selection, tree, plan = first_questions(rep)
    return rep, tree, plan


def test_a_no_change_run_records_the_bases_and_the_next_takes_them_without_listing(cache):
    src = Source()
    rep, tree, plan = run(cache, src)
    assert src.calls == ["sync", "choices_written", "snapshot_marks", "listing"]  # marks before the listing
    assert plan is not None and set(plan.same) == set(DATASETS) and rep.report.source_recorded == 0
    rec = json.loads(cache.get(SR.key("j")))
    assert rec["marks"] == dict.fromkeys(DATASETS, OLD) and rec["bases"]["tank/d"] == [SNAP, 11, 5, False]

    src = Source()
    rep, tree, plan = run(cache, src)
    assert src.calls == ["sync", "choices_written +snapshots_changed"]  # one column more, no listing
    assert rep.report.source_recorded == 2 and plan is not None and set(plan.same) == set(DATASETS)
    assert tree == {"tank/d": [Snap(SNAP, 11, 5)], "tank/d/a": [Snap(SNAP, 12, 5)]}
    assert plan.same["tank/d"] == Snap(SNAP, 11, 5)


def moved(src):
    src.changed["tank/d/a"] += 60
    return src


def written(src):
    src.written = 4096
    return src


@pytest.mark.parametrize("then", [moved, written], ids=["snapshots_changed moved", "something written"])
def test_the_record_does_not_stand_once_a_value_moved_or_something_was_written(cache, then):
    run(cache, Source())
    src = then(Source())
    rep, tree, plan = run(cache, src)
    assert "listing" in src.calls and rep.report.source_recorded == 0
    assert tree["tank/d"] == [Snap("older", 9, 3), Snap(SNAP, 11, 5)]  # the real listing


def test_the_backup_that_lost_a_base_is_found_with_a_record_standing(cache):
    run(cache, Source())
    src = Source()
    rep, tree, plan = run(cache, src, guids={"backup/d@" + SNAP: 11, "backup/d/a@" + SNAP: 99})
    assert "listing" in src.calls and rep.report.source_recorded == 0 and plan is None
    assert sum("no longer holds" in n for n in rep.report.notes) == 1, rep.report.notes


def test_a_value_read_within_two_seconds_of_its_change_is_not_recorded(cache):
    src = Source(changed=int(time.time()))  # a snapshot this second: a change later this second would not show
    run(cache, src)
    assert cache.get(SR.key("j")) is None


@pytest.mark.parametrize("kind", ["pull", "dry run", "no property", "written"])
def test_no_record_for_a_pull_job_a_dry_run_a_zfs_without_the_property_or_a_changed_run(cache, kind):
    src = Source(has_property=kind != "no property", written=4096 if kind == "written" else 0)
    run(cache, src, pull=kind == "pull", dry_run=kind == "dry run")
    assert cache.get(SR.key("j")) is None
    assert ("snapshot_marks" in src.calls) == (kind == "no property")  # asked only where all looked unchanged


@pytest.mark.parametrize("raw", ["not json", json.dumps({"marks": {}, "bases": {"tank/d": ["x", "y", 1, 0]}}),
                                 json.dumps({"listed": 0, "marks": {}, "bases": {}}),
                                 json.dumps({"listed": "today", "marks": {}, "bases": {}})],
                         ids=["text", "bad guid", "too old", "no time"])
def test_a_record_that_is_not_one_or_too_old_is_listed_past(cache, raw):
    cache.set(SR.key("j"), raw)
    src = Source()
    rep, tree, plan = run(cache, src)
    assert "listing" in src.calls and rep.report.source_recorded == 0
    assert plan is not None and set(plan.same) == set(DATASETS)


def test_a_zfs_that_lost_the_property_lists_and_still_finds_no_change(cache):
    run(cache, Source())
    src = Source(has_property=False)
    rep, tree, plan = run(cache, src)
    assert src.calls[:3] == ["sync", "choices_written +snapshots_changed", "backup_choices"] and "listing" in src.calls
    assert plan is not None and set(plan.same) == set(DATASETS)
    assert cache.get(SR.key("j")) is None  # the next runs ask without the property
    src = Source(has_property=False)
    run(cache, src)
    assert src.calls[:2] == ["sync", "choices_written"], src.calls


def test_a_run_with_anything_to_send_lists_the_source_even_where_the_record_would_stand(cache, monkeypatch):
    """The record is never the listing a send or a prune reads: were `stands` ever to let a changed
    dataset through, the run still lists (in the lane, with that check taken out, the run went on
    to send from the record's one-snapshot tree)."""
    run(cache, Source())
    monkeypatch.setattr(SR, "stands", lambda rep, rec, datasets, written: {
        "tank/d": [Snap(SNAP, 11, 5)], "tank/d/a": [Snap(SNAP, 12, 5)]})
    src = written(Source())
    rep, tree, plan = run(cache, src)
    assert "listing" in src.calls and rep.report.source_recorded == 0
    assert tree["tank/d"] == [Snap("older", 9, 3), Snap(SNAP, 11, 5)]


def test_marks_that_cannot_be_read_record_nothing_and_the_no_change_run_goes_on(cache):
    src = Source()
    src.marks_fail = True
    rep, tree, plan = run(cache, src)
    assert src.calls == ["sync", "choices_written", "snapshot_marks", "listing"]
    assert plan is not None and set(plan.same) == set(DATASETS) and cache.get(SR.key("j")) is None
