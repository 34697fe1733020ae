"""Journal-less leftovers of rebal's naming scheme: removed only where provably safe."""

import os

from rebal.rebalance.files import group_tmp_name, old_name, tmp_name
from rebal.rebalance.leftovers import clean
from rebal.rebalance.scan import Filters, scan


def mk(path, data=b"x"):
    with open(path, "wb") as f:
        f.write(data)
    return os.lstat(path).st_ino


def test_rules(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    ino = mk(d / "file", b"original")
    stale_copy = d / os.fsdecode(tmp_name(ino))
    mk(stale_copy, b"half a copy")  # the swap never happened: the original is still there
    group_copy = d / os.fsdecode(group_tmp_name(ino, 2))
    mk(group_copy, b"copy")
    orphan = d / os.fsdecode(tmp_name(ino + 1000))  # its original is not here: it may be the only copy
    mk(orphan, b"?")
    anchor = d / os.fsdecode(old_name(ino))
    os.link(d / "file", anchor)  # a second name of the file still under its real name
    lone = d / os.fsdecode(old_name(ino + 2000))
    mk(lone, b"only name")  # the only name of its data: never removed
    ino2 = mk(d / "other")
    held = d / os.fsdecode(tmp_name(ino2))
    mk(held)
    fd = os.open(held, os.O_RDONLY)  # a process has it open
    try:
        sc = scan([os.fsencode(tmp_path)], Filters())
        assert sorted(sc.skips.temps) == sorted(os.fsencode(p) for p in (stale_copy, group_copy, orphan, anchor,
                                                                           lone, held))
        res = clean(sc.skips.temps)
    finally:
        os.close(fd)
    assert sorted(res.removed) == sorted(str(p) for p in (stale_copy, group_copy, anchor))
    left = dict(res.left)
    assert "not in this directory" in left[str(orphan)]
    assert "only name" in left[str(lone)]
    assert "open" in left[str(held)]
    assert (d / "file").read_bytes() == b"original" and os.lstat(d / "file").st_nlink == 1
    assert orphan.exists() and lone.exists() and held.exists()


def test_nothing_to_do():
    assert clean([]).removed == [] and clean([b"/nonexistent/.rebal-1.tmp"]).left == []
