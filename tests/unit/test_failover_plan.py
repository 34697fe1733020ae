"""The pure decisions of a failback (recover/failback.py) and the gate's view of what a command
writes (gate/serve.py), without ZFS."""

from __future__ import annotations

import pytest

from rebal.config import Replicate
from rebal.errors import UsageError
from rebal.gate.check import Policy
from rebal.gate.serve import _written
from rebal.recover.failback import all_kept, common_base
from rebal.recover.failover import backup_here
from rebal.zfs.snaps import Snap


def test_the_base_is_the_newest_snapshot_both_hold_by_guid_whatever_its_name():
    backup = [Snap("rebal-j-1", 11, 100), Snap("rebal-j-2", 12, 200), Snap("rebal-j-3", 13, 300), Snap("F", 14, 400)]
    server = [Snap("rebal-j-1", 11, 10), Snap("renamed", 12, 20), Snap("rebal-j-3", 99, 30),  # same name, not the same
              Snap("rebal-j-3", 13, 5, bookmark=True)]  # a bookmark cannot be received onto
    assert common_base(backup, server, "F").name == "rebal-j-2"
    assert common_base(backup, [Snap("x", 1, 1)], "F") is None
    assert common_base(backup, [Snap("F", 14, 1)], "F") is None  # the failback's own point is never its base


def test_a_rollback_is_allowed_only_when_every_later_snapshot_is_kept():
    after = [Snap("admins", 21, 50), Snap("rebal-diverged-T", 22, 60)]
    assert all_kept(after, [Snap("admins", 21, 5), Snap("rebal-diverged-T", 22, 6)])
    assert not all_kept(after, [Snap("rebal-diverged-T", 22, 6)])  # one missing: nothing rolled back
    assert not all_kept(after, [Snap("admins", 21, 5, bookmark=True), Snap("rebal-diverged-T", 22, 6)])
    assert not all_kept([], [Snap("a", 1, 1)])  # nothing to keep is no proof of keeping


@pytest.mark.parametrize("line,written", [
    (["zfs", "receive", "-s", "-u", "b/g/x"], ["b/g/x"]),
    (["zfs", "receive", "-A", "b/g/x"], []),  # forgetting a cut receive writes nothing
    (["zfs", "receive"], []),  # the usage text
    (["zfs", "snapshot", "b/g/x@s", "b/g/y@s"], ["b/g/x", "b/g/y"]),
    (["zfs", "set", "readonly=on", "b/g/x"], ["b/g/x"]),
    (["zfs", "create", "-o", "readonly=off", "b/g/p"], ["b/g/p"]),
    (["zfs", "list", "-H", "b/g/x"], []),
])
def test_the_gate_knows_what_a_command_would_write(line, written):
    assert _written(Policy("receive", "b/g"), [line], rsync=False) == written


def test_the_gate_counts_an_rsync_as_writing_its_root_and_a_piped_receive_by_its_target():
    assert _written(Policy("receive", "b/g"), [["rsync", "--server", ".", "/b/g/d"]], rsync=True) == ["b/g"]
    assert _written(Policy("receive", "b/g"), [["zstd", "-dc"], ["zfs", "receive", "b/g/x"]], rsync=False) == ["b/g/x"]


def test_failover_runs_where_the_backup_is():
    push = Replicate(name="p", source="tank/data", target="backup/data", target_host="backup.example")
    with pytest.raises(UsageError, match="pull job"):
        backup_here(push)
    rsync = Replicate(name="r", source="tank/data", target="/srv/b", mode="rsync", direction="pull",
                      source_host="fs.example")
    with pytest.raises(UsageError, match="rsync job"):
        backup_here(rsync)
    assert backup_here(Replicate(name="q", source="tank/data", target="backup/data", direction="pull",
                                 source_host="fs.example")).local


def test_keys_prints_a_push_jobs_description_for_its_backup_host_and_it_loads_there(tmp_path):
    from rebal.config import load
    from rebal.replicate.pairing import failover_block

    push = Replicate(name="nightly", source="tank/data", target="backup/data", target_host="backup.example",
                     recursive=True)
    cfg = tmp_path / "backup-host.toml"
    cfg.write_text(failover_block(push) + "\n")
    j = load(str(cfg)).job("nightly")
    assert (j.direction, j.source, j.target, j.recursive) == ("pull", "tank/data", "backup/data", True)
    assert backup_here(j).local  # failover takes it there
    assert failover_block(Replicate(name="l", source="tank/a", target="tank/b")) == ""  # a local target: none
