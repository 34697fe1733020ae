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


def test_the_kernel_says_whether_a_copy_is_open(tmp_path):
    """A write lease is granted only on a file no other process has open: asked of the kernel, no
    look into /proc (which the systemd units cannot do for other users' processes)."""
    import subprocess

    from rebal.rebalance.leftovers import in_use

    p = tmp_path / ".rebal-1.tmp"
    p.write_bytes(b"copy")
    assert in_use(os.fsencode(p)) is False
    with open(p, "ab") as out:
        holder = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=out)  # another process writes to it
    try:
        assert in_use(os.fsencode(p)) is True
    finally:
        holder.communicate(b"")
    assert in_use(os.fsencode(p)) is False


def test_where_nothing_can_tell_the_copy_stays(tmp_path):
    """A process that can neither lease the copy nor read other users' descriptors (here: user nobody)
    leaves it, with the reason, instead of taking "none seen" for "none open"."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        import pytest

        pytest.skip("needs root and setpriv to run a check as another user")
    d = tempfile.mkdtemp(dir="/var/tmp", prefix="rebal-leftover-")
    try:
        os.chmod(d, 0o755)
        ino = mk(os.path.join(d, "file"), b"original")
        copy = os.path.join(d, os.fsdecode(tmp_name(ino)))
        mk(copy, b"copy")
        os.chmod(copy, 0o644)  # nobody may read it, but not lease it: it is root's
        code = ("import json, os, sys; from rebal.rebalance.leftovers import clean; "
                "r = clean([os.fsencode(sys.argv[1])]); print(json.dumps([r.removed, r.left]))")
        src = os.path.dirname(os.path.dirname(os.path.dirname(__import__("rebal").__file__)))
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            code, copy], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=src),
                           check=True)
        removed, left = json.loads(r.stdout)
        assert removed == [] and left == [[copy, "cannot tell whether a process has it open"]]
        assert os.path.exists(copy)
    finally:
        shutil.rmtree(d)
