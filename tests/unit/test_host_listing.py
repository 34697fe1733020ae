"""A host's listings (rebal/zfs/host_list.py) on OpenZFS's fast path and on zfs-fuse's: every answer
is real recorded output (tests/fixtures/openzfs/listing-*, zfs-fuse/list-fast_*), the command lines
rebal runs are recorded and checked."""

from conftest import FIXTURES
import pytest

from rebal.errors import HostError
from rebal.process.command import Result
from rebal.transport import Here
from rebal.zfs.host import ZfsHost

OZ = FIXTURES / "openzfs"


def answer(name: str, rc: int) -> tuple[int, str, str]:
    err = OZ / f"listing-{name}.txt.stderr"
    return rc, (OZ / f"listing-{name}.txt").read_text(), err.read_text() if err.exists() else ""


def host(answers: dict[tuple[str, ...], tuple[int, str, str]], fast: bool = True) -> tuple[ZfsHost, list]:
    """A host whose zfs answers each command (by its first words) as recorded."""
    calls: list = []

    def runner(argv, **kw):
        calls.append(tuple(argv))
        for head, (rc, out, err) in answers.items():
            if tuple(argv[:len(head)]) == head:
                return Result(tuple(argv), rc, out, err)
        raise AssertionError(f"no recorded answer for {argv}")

    h = ZfsHost(Here(runner))
    h.lists_fast = fast
    return h, calls


LIST_D1 = ("zfs", "list", "-Hp", "-t", "all", "-d", "1")
TOKENS = ("zfs", "get", "-Hp", "-t", "filesystem,volume")


def test_a_part_of_the_backup_is_the_named_datasets_alone():
    """`zfs list -d 1` of the part also prints each one's children (fx/dst/b, no snapshots): left out,
    or a child would look like a backup without a snapshot; a name not there is no error."""
    h, calls = host({LIST_D1: answer("part_zfs-list-Hp-t-all-d1", 1),
                     TOKENS: answer("part_zfs-get-Hp-t-receive_resume_token", 1)})
    snaps, tokens = h.part(["fx/dst", "fx/dst/a", "fx/dst/nope"], tokens=True)
    assert sorted(snaps) == ["fx/dst", "fx/dst/a"] and tokens == {}
    assert [(s.name, s.guid, s.txg) for s in snaps["fx/dst/a"]] == [("s1", 3228194229987801945, 21),
                                                                   ("s2", 4223828551518941554, 23)]
    assert calls[0][:3] == ("zfs", "get", "-Hp") and calls[0][-3:] == ("fx/dst", "fx/dst/a", "fx/dst/nope")
    assert calls[1] == (*LIST_D1, "-o", "name,guid,createtxg", "fx/dst", "fx/dst/a", "fx/dst/nope")


def test_a_whole_tree_with_its_bookmarks_and_tokens_in_two_commands():
    h, calls = host({("zfs", "list", "-Hp", "-t", "all", "-r"): answer("tree_zfs-list-Hp-t-all-r", 0),
                     ("zfs", "get", "-Hp", "-r", "-t"): answer("tree_zfs-get-Hp-r-receive_resume_token", 0)})
    snaps, tokens = h.tree_tokens("fx/src", True)
    assert sorted(snaps) == ["fx/src", "fx/src/a", "fx/src/b"] and tokens == {}
    assert [s.name for s in snaps["fx/src/a"]] == ["s1", "s2"]  # a backup's bookmarks are no base
    assert len(calls) == 2
    # the job's own listing of its source: with its bookmarks, the cursor of the next incremental
    a = h.listing("fx/src", True)["fx/src/a"]
    assert [(s.name, s.bookmark) for s in a] == [("s1", False), ("s2", True), ("s2", False)]  # (txg, snapshot last)
    assert a[1].guid == a[2].guid == 4223828551518941554  # a bookmark keeps its snapshot's guid
    assert calls[-1] == ("zfs", "list", "-Hp", "-t", "all", "-r", "-o", "name,guid,createtxg", "fx/src")
    assert [s.bookmark for s in h.listing("fx/src", True, bookmarks=False)["fx/src/a"]] == [False, False]


def test_a_resume_token_is_read_from_the_side_command():
    out = "fx/dst\t-\nfx/dst/a\t1-e0f1-abc\n"
    h, _ = host({LIST_D1: answer("part_zfs-list-Hp-t-all-d1", 1), TOKENS: (0, out, "")})
    assert h.part(["fx/dst", "fx/dst/a"], tokens=True)[1] == {"fx/dst/a": "1-e0f1-abc"}


def test_the_guids_of_named_bases_leave_out_one_that_is_gone():
    h, calls = host({("zfs", "get", "-Hp", "-o", "name,value", "guid"): answer("bases_zfs-get-Hp-guid", 1)})
    got = h.guids(["fx/dst/a@s2", "fx/dst/b@s2", "fx/dst/b@gone"])
    assert got == {"fx/dst/a@s2": 4223828551518941554, "fx/dst/b@s2": 6260015780190806324}
    assert len(calls) == 1


def test_a_zfs_without_the_fast_listing_gets_the_slow_one():
    """A zfs whose usage text suggested `zfs list -p` but that has none (zfs-fuse's answer): the
    listing falls back to `zfs get`, and remembers."""
    fuse_err = (FIXTURES / "zfs-fuse" / "list-fast_zfs-list-Hp.txt.stderr").read_text()
    slow = "zt/a\tguid\t11\nzt/a\tcreatetxg\t3\nzt/a@s1\tguid\t12\nzt/a@s1\tcreatetxg\t4\n"
    h, calls = host({("zfs", "list", "-Hp"): (2, "", fuse_err), ("zfs", "get", "-Hp"): (0, slow, "")})
    assert [s.name for s in h.listing("zt/a", False)["zt/a"]] == ["s1"]
    assert h.lists_fast is False and [c[:2] for c in calls] == [("zfs", "list"), ("zfs", "get")]
    h.listing("zt/a", False)
    assert calls[-1][:2] == ("zfs", "get") and len(calls) == 3


def test_an_error_that_is_not_a_missing_name_is_raised():
    h, _ = host({("zfs", "get", "-Hp"): (1, "", "cannot open 'fx/dst/a@s2': permission denied\n")})
    with pytest.raises(HostError, match="permission denied"):
        h.guids(["fx/dst/a@s2"])


def test_a_parent_is_asked_only_whether_it_is_there():
    """Listing the job's root with `-d 1` would open every dataset of the tree: a parent of a changed
    dataset is asked by name alone (`zfs list -H -o name`), beside the listing."""
    h, calls = host({LIST_D1: answer("part_zfs-list-Hp-t-all-d1", 1),
                     ("zfs", "list", "-H", "-o", "name"): (1, "fx/dst\n", "cannot open 'fx/gone': dataset does not exist\n")})
    snaps, _ = h.part(["fx/dst/a"], tokens=False, parents=["fx/dst", "fx/gone"])
    assert snaps["fx/dst"] == [] and "fx/gone" not in snaps and [s.name for s in snaps["fx/dst/a"]] == ["s1", "s2"]
    assert ("zfs", "list", "-H", "-o", "name", "-t", "filesystem,volume", "fx/dst", "fx/gone") in calls
    assert [c for c in calls if c[:2] == ("zfs", "list") and "-d" in c][0][-1] == "fx/dst/a"


def test_every_pool_by_iostat_leaves_out_a_pool_gone_since_the_listing():
    """zfs-fuse's way to every pool (`zpool iostat -v`, then `zpool status`): a pool destroyed between
    the two commands is left out, not a failure of the whole listing (a health check of every pool
    failed so: `zpool status` named it). The status is asked by no name; recorded zfs-fuse output."""
    zf = OZ.parent / "zfs-fuse"
    iostat = (zf / "zfsfuse_mixed_zpool-iostat-v.txt").read_text()
    status = (zf / "zfsfuse_mixed_zpool-status.txt").read_text()
    gone = (1, "", "cannot open 'tank': no such pool\n")
    for after, want in (("no pools available\n", []), (status, ["tank"])):
        h, calls = host({("zpool", "iostat", "-v"): (0, iostat, ""), ("zpool", "status", "tank"): gone,
                         ("zpool", "status"): (0, after, "")})
        h.flavour = "iostat"
        assert [p.name for p in h.pools()] == want
        assert ("zpool", "status") in calls and ("zpool", "status", "tank") not in calls, calls
    h, calls = host({("zpool", "iostat", "-v"): (0, iostat, ""), ("zpool", "status", "tank"): (0, status, "")})
    h.flavour = "iostat"
    assert [p.name for p in h.pools(["tank"])] == ["tank"]  # a pool named: asked by its name


def test_when_a_backups_snapshots_last_changed_with_its_token_in_one_command():
    """`snapshots_changed` in seconds and the resume token of the datasets named (OpenZFS 2.4.4): a
    dataset with no snapshot (its value "-") and one not there are left out: no record stands for
    them."""
    h, calls = host({("zfs", "list", "-Hp", "-o"): answer("marks_zfs-list", 1)})
    marks = h.snapshot_marks(["fx/dst", "fx/cut", "fx/empty", "fx/nope"])
    assert marks == {"fx/dst": (1796681021, "")}
    assert calls == [("zfs", "list", "-Hp", "-o", "name,snapshots_changed,receive_resume_token", "-t",
                      "filesystem,volume", "fx/dst", "fx/cut", "fx/empty", "fx/nope")]


def test_a_zfs_without_snapshots_changed_says_none():
    """zfs-fuse (no `zfs list -p`, no such property): None, and the run lists as before."""
    err = (FIXTURES / "zfs-fuse" / "marks_zfs-list-Hp.txt.stderr").read_text()
    h, _ = host({("zfs", "list"): (2, "", err)}, fast=False)
    assert h.snapshot_marks(["tank/backup"]) is None
