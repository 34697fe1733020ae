"""A run with a record asks the backup first and the source meanwhile (unchanged.first_questions):
the backup's answer must be on its way before this side's first command ends, and what was written
since the bases comes from the selection's own listing where the names are few."""

import threading
from types import SimpleNamespace

from rebal.replicate.policy import Snap
from rebal.replicate.select import Selection
from rebal.replicate.unchanged import MANY_NAMES, first_questions
from rebal.replicate.zfs_run import Job, ZfsReport

SNAP = "rebal-j-20261207T120000Z"


class Source:
    def __init__(self, asked_backup: threading.Event, names: int) -> None:
        self.asked_backup = asked_backup
        self.calls: list[str] = []
        self.names = names

    def sync(self, pool):
        self.calls.append("sync")
        # the backup's question must already be out: were it asked after this side's work, this waits in vain
        return self.asked_backup.wait(10)

    def choices_written(self, source, recursive, props):
        self.calls.append(f"choices_written {len(props)}")
        return ([("tank/d", "-"), ("tank/d/a", "-")],
                {("tank/d", f"written#{SNAP}"): 0, ("tank/d/a", f"written#{SNAP}"): 4096})

    def backup_choices(self, source, recursive):
        self.calls.append("backup_choices")
        return [("tank/d", "-"), ("tank/d/a", "-")]

    def written_since(self, source, recursive, props):
        self.calls.append("written_since")
        return {("tank/d", f"written#{SNAP}"): 0, ("tank/d/a", f"written#{SNAP}"): 4096}

    def listing(self, root, recursive):
        self.calls.append("listing")
        return {"tank/d": [Snap(SNAP, 11, 5, bookmark=True)], "tank/d/a": [Snap(SNAP, 12, 5, bookmark=True)]}


def run(names: int):
    asked = threading.Event()
    src = Source(asked, names)
    landed = {"tank/d": SNAP, "tank/d/a": SNAP}
    landed.update({f"tank/d/x{i}": f"rebal-j-2026120{i % 9 + 1}T000000Z" for i in range(names - 1)})

    def guids(snaps):
        asked.set()
        return {"backup/d@" + SNAP: 11, "backup/d/a@" + SNAP: 12}

    rep = SimpleNamespace(job=Job("j", "tank/d", "backup/d", recursive=True), landed=landed, source=src,
                          target=SimpleNamespace(guids=guids), report=ZfsReport(), selection=Selection("tank/d"), cache=None, dry_run=False,
                          target_of=lambda ds: "backup/d" + ds[len("tank/d"):])
    selection, tree, plan = first_questions(rep)
    return src, selection, tree, plan


def test_the_backup_is_asked_before_the_source_answers_and_written_comes_with_the_selection():
    src, selection, tree, plan = run(1)
    assert src.calls == ["sync", "choices_written 2", "listing"]  # no backup_choices, no written_since
    assert selection.included == ["tank/d", "tank/d/a"]
    assert plan is not None and set(plan.same) == {"tank/d"} and set(plan.bases) == {"tank/d", "tank/d/a"}
    assert plan.listed == ["backup/d/a"]


def test_many_recorded_names_ask_what_was_written_apart():
    src, selection, tree, plan = run(MANY_NAMES + 3)
    assert src.calls == ["sync", "backup_choices", "listing", "written_since"]
    assert plan is not None and set(plan.same) == {"tank/d"}
