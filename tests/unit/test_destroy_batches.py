"""Many snapshots destroyed in few commands (rebal/zfs/destroy.py). The ZFS below replays what
OpenZFS does with a comma list (`zfs destroy ds@a,b,c`: lzc_destroy_snaps, one transaction, all or
none: a held snapshot keeps the whole list, recorded in the lane, tests/openzfs/test_lane_replicate.py)
and what zfs-fuse answers to one (it reads `ds@a,b` as one name that does not exist)."""

from __future__ import annotations

import pytest

from rebal.errors import CommandFailed, UsageError
from rebal.process.command import Result
from rebal.zfs import destroy
from rebal.zfs.destroy import LINE, Batches, chunks


class Pool:
    def __init__(self, snaps: list[str], held: set[str] = frozenset(), lists: bool = True) -> None:
        self.snaps, self.held, self.lists = set(snaps), set(held), lists
        self.commands: list[list[str]] = []

    def run(self, argv: list[str], **_kw) -> Result:
        self.commands.append(list(argv))
        assert argv[:2] == ["zfs", "destroy"]
        ds, _, spec = argv[-1].partition("@")
        names = spec.split(",")
        if len(names) > 1 and not self.lists:
            raise CommandFailed(argv, 1, f"cannot open '{argv[-1]}': dataset does not exist")
        if any(n in self.held for n in names):  # all or none
            raise CommandFailed(argv, 1, f"cannot destroy snapshots in {ds}: dataset is busy")
        self.snaps -= set(names)
        return Result(list(argv), 0, "", "")


def names(n: int) -> list[str]:
    return [f"rebal-nightly-2026{i:06d}T000000Z" for i in range(n)]


def test_a_backlog_goes_in_few_long_lists():
    pool = Pool(names(2500))
    assert Batches(pool.run).destroy("tank/data", names(2500)) == {}
    assert pool.snaps == set() and len(pool.commands) == 3  # 1,000 + 1,000 + 500
    assert all(len(c[-1]) < LINE + 100 for c in pool.commands)


def test_a_list_is_cut_by_its_bytes_too():
    long = [f"rebal-{'j' * 200}-{i:06d}" for i in range(1000)]
    parts = chunks(long)
    assert len(parts) > 1 and sum(map(len, parts)) == 1000 and [n for p in parts for n in p] == long
    assert all(sum(len(n) + 1 for n in p) <= LINE for p in parts)


@pytest.mark.parametrize("held", [{7}, {0, 999}, {100, 101, 102}])
def test_a_snapshot_that_cannot_go_costs_a_few_commands_and_is_the_only_one_kept(held):
    snaps = names(1000)
    stuck = {snaps[i] for i in held}
    pool = Pool(snaps, held=stuck)
    failed = Batches(pool.run).destroy("tank/data", snaps)
    assert set(failed) == stuck and all("busy" in why for why in failed.values())
    assert pool.snaps == stuck  # every other one is gone
    assert len(pool.commands) <= 1 + 2 * len(held) * 10  # halving: about 2 log2(1000) a stuck one
    assert len(pool.commands) < 100


def test_a_zfs_without_comma_lists_is_asked_one_at_a_time_once_it_said_so():
    snaps = names(50)
    pool = Pool(snaps, lists=False)
    b = Batches(pool.run)
    assert b.destroy("tank/data", snaps) == {} and pool.snaps == set()
    assert b.lists is False
    assert len(pool.commands) == 1 + 50  # the list it refused, then each one
    pool2 = Pool(snaps, lists=False)
    b.run = pool2.run
    assert b.destroy("tank/data", snaps) == {} and len(pool2.commands) == 50  # remembered


def test_names_are_checked_before_any_command():
    pool = Pool(names(3))
    with pytest.raises(UsageError, match="bad snapshot name"):
        Batches(pool.run).destroy("tank/data", ["ok", "bad name;rm"])
    assert pool.commands == []
    assert destroy.destroy_argv("tank/data", ["a", "b"]) == ["zfs", "destroy", "tank/data@a,b"]
