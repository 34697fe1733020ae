"""The copier on a real tmpfs: content, holes, owner, mode, ns times, xattrs and POSIX ACLs survive;
changed, deleted and in-use files are never replaced."""

import fcntl
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fsenv import manifest, temp_leftovers

from rebal.rebalance.copier import (
    F_GETLEASE,
    Copier,
    FileRef,
    FileOutcome,
    old_name,
    tmp_name,
)
from rebal.throttle import Throttle


def ref_of(path: Path) -> FileRef:
    st = os.lstat(path)
    return FileRef.from_stat(os.fsencode(path.parent), os.fsencode(path.name), st)


def copy(path: Path, **kw) -> tuple:
    c = Copier(**kw)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return c.copy(dfd, ref_of(path))
    finally:
        os.close(dfd)


def test_rewrites_with_a_new_inode_and_keeps_everything(richfs):
    f = richfs / "data.bin"
    f.write_bytes(os.urandom(3 * 2**20 + 12345))
    os.chown(f, 1234, 5678)
    os.chmod(f, 0o4751)  # setuid survives the chown of the copy
    os.setxattr(f, "user.note", b"hello\x00world")
    os.setxattr(f, "trusted.t", b"x" * 300)
    subprocess.run(["setfacl", "-m", "u:nobody:rw,g:daemon:r", str(f)], check=True)
    before = manifest(richfs)  # reads the content, which moves atime: set the times after
    os.utime(f, ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
    before[b"data.bin"]["mtime_ns"] = 1_500_000_000_987_654_321
    ino = os.lstat(f).st_ino
    res = copy(f)
    assert res.outcome is FileOutcome.SWAPPED, res
    st = os.lstat(f)
    assert st.st_ino != ino, "the file must be a new inode (new blocks)"
    assert st.st_atime_ns == 1_600_000_000_123_456_789
    assert stat.S_IMODE(st.st_mode) == before[b"data.bin"]["mode"] and (st.st_uid, st.st_gid) == (1234, 5678)
    assert st.st_mode & stat.S_ISUID
    after = manifest(richfs)
    assert after == before
    assert "system.posix_acl_access" in after[b"data.bin"]["xattrs"]
    assert temp_leftovers(richfs) == []


def test_holes_are_kept(richfs):
    f = richfs / "sparse"
    with open(f, "wb") as fh:
        fh.write(b"a" * 4096)
        fh.seek(64 * 2**20)
        fh.write(b"b" * 4096)
        fh.seek(200 * 2**20)
        fh.truncate()  # a hole up to the end too
    before = manifest(richfs)
    blocks = os.lstat(f).st_blocks
    assert copy(f).outcome is FileOutcome.SWAPPED
    assert manifest(richfs) == before
    assert os.lstat(f).st_blocks <= blocks  # still sparse: a few KiB, not 200 MiB
    assert os.lstat(f).st_blocks * 512 < 1 * 2**20


def test_empty_file_and_long_name(richfs):
    name = "n" * 250 + ".dat"  # 255 bytes
    f = richfs / name
    f.write_bytes(b"")
    g = richfs / ("x" * 255)
    g.write_bytes(b"payload")
    before = manifest(richfs)
    assert copy(f).outcome is FileOutcome.SWAPPED
    assert copy(g).outcome is FileOutcome.SWAPPED
    assert manifest(richfs) == before


@pytest.mark.parametrize("verify", ["hash", "size", "none"])
def test_verify_modes(richfs, verify):
    f = richfs / "v"
    f.write_bytes(os.urandom(700_000))
    before = manifest(richfs)
    assert copy(f, verify=verify).outcome is FileOutcome.SWAPPED
    assert manifest(richfs) == before


def test_changed_since_scan_is_not_replaced(richfs):
    f = richfs / "c"
    f.write_bytes(b"one")
    r = ref_of(f)
    f.write_bytes(b"two, longer")
    dfd = os.open(richfs, os.O_RDONLY)
    res = Copier().copy(dfd, r)
    os.close(dfd)
    assert res.outcome is FileOutcome.CHANGED
    assert f.read_bytes() == b"two, longer"
    assert temp_leftovers(richfs) == []


def test_deleted_file_is_not_resurrected(richfs):
    f = richfs / "gone"
    f.write_bytes(b"x")
    r = ref_of(f)
    f.unlink()
    dfd = os.open(richfs, os.O_RDONLY)
    res = Copier().copy(dfd, r)
    os.close(dfd)
    assert res.outcome is FileOutcome.GONE
    assert not f.exists() and temp_leftovers(richfs) == []


class _Hook(Copier):
    """A copier that runs ``action`` once the temp copy exists (as a concurrent process would)."""

    def __init__(self, action, **kw):
        super().__init__(**kw)
        self.action = action

    def _copy_metadata(self, *args):
        self.action()
        super()._copy_metadata(*args)


def run_hooked(path: Path, action, **kw):
    c = _Hook(action, **kw)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        return c.copy(dfd, ref_of(path))
    finally:
        os.close(dfd)


@pytest.mark.parametrize("lease", [True, False])
def test_file_appended_during_copy_is_not_replaced(richfs, lease):
    f = richfs / "grow"
    f.write_bytes(b"a" * 100_000)
    # with a lease, the writer's open blocks until rebal lets go: let it append in a thread
    def append():
        with open(f, "ab") as fh:
            fh.write(b"tail")

    if lease:
        t = threading.Thread(target=append)

        class WaitsForBreak(_Hook):
            def _copy_metadata(self, src, *args):
                # start the writer, and go on only once its open is blocked on our lease (the kernel
                # then reports the lease as breaking): the append really lands during the copy
                t.start()
                deadline = time.monotonic() + 10
                while fcntl.fcntl(src, F_GETLEASE) == fcntl.F_RDLCK and time.monotonic() < deadline:
                    time.sleep(0.001)
                Copier._copy_metadata(src, *args)

        c = WaitsForBreak(lambda: None, use_lease=True)
        dfd = os.open(f.parent, os.O_RDONLY)
        try:
            res = c.copy(dfd, ref_of(f))
        finally:
            os.close(dfd)
        t.join()
    else:
        res = run_hooked(f, append, use_lease=False)
    assert res.outcome in (FileOutcome.CHANGED, FileOutcome.IN_USE)
    assert f.read_bytes() == b"a" * 100_000 + b"tail"
    assert temp_leftovers(richfs) == []


def test_file_deleted_during_copy_is_not_resurrected(richfs):
    f = richfs / "del"
    f.write_bytes(b"z" * 5000)
    res = run_hooked(f, f.unlink)
    assert res.outcome is FileOutcome.GONE
    assert not f.exists() and temp_leftovers(richfs) == []


def test_file_open_for_writing_is_skipped(richfs):
    f = richfs / "busy"
    f.write_bytes(b"q" * 10)
    with open(f, "ab"):
        res = copy(f)
    assert res.outcome is FileOutcome.IN_USE
    assert f.read_bytes() == b"q" * 10


def test_temp_name_taken_by_someone_else_is_left_alone(richfs):
    f = richfs / "t"
    f.write_bytes(b"data")
    other = richfs / tmp_name(os.lstat(f).st_ino).decode()
    other.write_bytes(b"not ours")
    res = copy(f)
    assert res.outcome is FileOutcome.FAILED and "exists" in res.reason
    assert other.read_bytes() == b"not ours" and f.read_bytes() == b"data"


def test_stop_aborts_and_cleans_up(richfs):
    f = richfs / "big"
    f.write_bytes(os.urandom(4 * 2**20))
    stop = threading.Event()
    stop.set()
    res = copy(f, stop=stop)
    assert res.outcome is FileOutcome.ABORTED
    assert temp_leftovers(richfs) == []


def test_enospc_keeps_the_original(tmp_path):
    import subprocess

    from fsenv import umount

    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "rebal-small", str(where)], check=True)
    try:
        f = where / "f"
        f.write_bytes(os.urandom(5 * 2**20))  # a copy of 5 MiB cannot fit beside it in 8 MiB
        data = f.read_bytes()
        res = copy(f)
        assert res.outcome is FileOutcome.NOSPACE
        assert f.read_bytes() == data and temp_leftovers(where) == []
    finally:
        umount(where)


def test_throttle_limits_rate():
    import time

    t = Throttle(100 * 2**20)
    stop = threading.Event()
    t0 = time.monotonic()
    for _ in range(30):
        t.consume(10 * 2**20, stop)  # 300 MiB at 100 MiB/s: ~2 s beyond the 1 s burst
    assert time.monotonic() - t0 >= 1.5


def test_names():
    assert tmp_name(255) == b".rebal-ff.tmp" and old_name(255) == b".rebal-ff.old"


def files_only(m: dict) -> dict:
    """The manifest without directories (the engine, not the copier, restores directory times)."""
    return {k: v for k, v in m.items() if not (isinstance(v, dict) and stat.S_ISDIR(v["type"]))}


def group_of(richfs, names=("a/x", "a/y", "b/z")):
    for sub in ("a", "b"):
        (richfs / sub).mkdir(exist_ok=True)
    first = richfs / names[0]
    first.write_bytes(os.urandom(200_000))
    os.chmod(first, 0o640)
    for n in names[1:]:
        os.link(first, richfs / n)
    return [richfs / n for n in names]


def group_refs(paths):
    fds, out = [], []
    for p in paths:
        fd = os.open(p.parent, os.O_RDONLY | os.O_DIRECTORY)
        fds.append(fd)
        out.append((fd, ref_of(p)))
    return out, fds


def test_hardlink_group_is_recreated_as_one_inode(richfs):
    paths = group_of(richfs)
    before = manifest(richfs)
    ino = os.lstat(paths[0]).st_ino
    seen = []
    refs, fds = group_refs(paths)
    try:
        res = Copier().copy_group(refs, on_copy=seen.append)
    finally:
        for fd in fds:
            os.close(fd)
    assert res.outcome is FileOutcome.SWAPPED, res
    inos = {os.lstat(p).st_ino for p in paths}
    assert len(inos) == 1 and ino not in inos and seen == [inos.pop()]
    assert os.lstat(paths[0]).st_nlink == 3
    assert files_only(manifest(richfs)) == files_only(before) and temp_leftovers(richfs) == []


def test_hardlink_group_switched_back_when_a_writer_comes(richfs):
    paths = group_of(richfs)
    before = manifest(richfs)
    ino = os.lstat(paths[0]).st_ino

    switched = []

    class BreaksMidway(Copier):
        @staticmethod
        def lease_held(fd):
            # the lease breaks once the first name points at the copy (a writer came meanwhile)
            if os.lstat(paths[0]).st_ino != ino:
                switched.append(True)
                return False
            return True

    refs, fds = group_refs(paths)
    try:
        res = BreaksMidway().copy_group(refs)
    finally:
        for fd in fds:
            os.close(fd)
    assert res.outcome is FileOutcome.IN_USE, res
    assert switched, "the group was never half switched: the test did not test the switch back"
    assert {os.lstat(p).st_ino for p in paths} == {ino} and os.lstat(paths[0]).st_nlink == 3
    assert files_only(manifest(richfs)) == files_only(before) and temp_leftovers(richfs) == []


def test_hardlink_group_that_changed_is_left(richfs):
    paths = group_of(richfs)
    refs, fds = group_refs(paths)
    os.link(paths[0], richfs / "b" / "extra")  # a fourth name appears
    try:
        res = Copier().copy_group(refs)
    finally:
        for fd in fds:
            os.close(fd)
    assert res.outcome is FileOutcome.CHANGED and temp_leftovers(richfs) == []


def test_failed_switch_back_keeps_the_original(richfs):
    """If putting a half-switched group back fails too, the original keeps its anchor name."""
    paths = group_of(richfs)
    ino = os.lstat(paths[0]).st_ino
    data = paths[0].read_bytes()

    class BreaksTwice(Copier):
        @staticmethod
        def lease_held(fd):
            return os.lstat(paths[0]).st_ino == ino  # breaks once the first name was switched

        @staticmethod
        def _switch_back(*a):
            raise OSError(5, "Input/output error")

    refs, fds = group_refs(paths)
    try:
        res = BreaksTwice().copy_group(refs)
    finally:
        for fd in fds:
            os.close(fd)
    assert res.outcome is FileOutcome.FAILED and "kept as .rebal-" in res.reason
    anchor = richfs / "a" / old_name(ino).decode()
    assert anchor.exists() and os.lstat(anchor).st_ino == ino and anchor.read_bytes() == data
    assert all(p.read_bytes() == data for p in paths)


@pytest.mark.parametrize("size", [0, 1, 4097, 1 << 20, (1 << 20) + 1, 3 << 20])
@pytest.mark.parametrize("damage", ["longer", "shorter", "flipped"])
def test_a_copy_that_differs_is_never_swapped_in(richfs, monkeypatch, size, damage):
    """The read-back check catches a copy one byte longer, one byte shorter or one bit off, at sizes
    around the read chunk (the last read asks one byte past the end)."""
    f = richfs / "v.bin"
    data = os.urandom(size)
    f.write_bytes(data)
    if damage != "longer" and size == 0:
        return  # an empty file cannot be shorter nor flipped
    real = Copier._copy_data

    def damaged(self, src, dst, n, leased, dense=False):
        out = real(self, src, dst, n, leased, dense)
        if damage == "longer":
            os.pwrite(dst, b"x", n)
        elif damage == "shorter":
            os.ftruncate(dst, n - 1)
        else:
            b = os.pread(dst, 1, n // 2)
            os.pwrite(dst, bytes([b[0] ^ 1]), n // 2)
        return out

    monkeypatch.setattr(Copier, "_copy_data", damaged)
    ino = os.lstat(f).st_ino
    res = copy(f)
    assert res.outcome is FileOutcome.VERIFY, res
    assert os.lstat(f).st_ino == ino and f.read_bytes() == data
    assert temp_leftovers(richfs) == []


@pytest.mark.parametrize("size", [0, 1, 4096, 1 << 20, (1 << 20) + 1])
def test_an_exact_copy_of_every_size_is_swapped_in(richfs, size):
    f = richfs / "ok.bin"
    data = os.urandom(size)
    f.write_bytes(data)
    res = copy(f)
    assert res.outcome is FileOutcome.SWAPPED, res
    assert f.read_bytes() == data


def _acl(path) -> str:
    return subprocess.run(["getfacl", "-cp", str(path)], capture_output=True, text=True, check=True).stdout


def _copy_peeking(f, peek):
    """Copy ``f``, calling ``peek(fstat of the copy)`` as its data is about to be written."""
    class Peek(Copier):
        def _copy_data(self, src, dst, *a, **kw):
            peek(os.fstat(dst))
            return super()._copy_data(src, dst, *a, **kw)

    dfd = os.open(f.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return Peek().copy(dfd, ref_of(f))
    finally:
        os.close(dfd)


def test_a_default_acl_of_the_directory_never_widens_who_may_read(richfs):
    """Issue 63: a 0640 file without an ACL in a directory whose default ACL grants uid 1001 rwx
    came out of the rewrite readable by uid 1001 (the copy inherited the default ACL)."""
    d = richfs / "shared"
    d.mkdir()
    subprocess.run(["setfacl", "-d", "-m", "u:1001:rwx", str(d)], check=True)
    f = d / "secret"
    f.write_bytes(b"only for 1000 and group 1234\n")
    os.chown(f, 1000, 1234)
    os.chmod(f, 0o640)
    subprocess.run(["setfacl", "-b", str(f)], check=True)  # the file itself has no ACL (made before the default)
    before, acl = manifest(richfs), _acl(f)
    seen = []  # with an ACL, the copy's group bits are the mask
    assert _copy_peeking(f, lambda st: seen.append(stat.S_IMODE(st.st_mode))).outcome is FileOutcome.SWAPPED
    assert _acl(f) == acl and "user:1001" not in _acl(f)
    assert manifest(richfs)[b"shared/secret"] == before[b"shared/secret"]  # (the directory's mtime: the caller's)
    assert seen and seen[0] & 0o077 == 0, seen  # the named user's rwx masked to nothing while written
    r = subprocess.run(["setpriv", "--reuid=1001", "--regid=1001", "--clear-groups", "cat", str(f)],
                       capture_output=True)
    assert r.returncode != 0


def test_a_setgid_directory_does_not_give_the_copy_its_group(richfs):
    d = richfs / "sgid"
    d.mkdir()
    os.chown(d, 0, 100)
    os.chmod(d, 0o2775)
    f = d / "f"
    f.write_bytes(b"x" * 5000)
    os.chown(f, 1000, 1234)
    os.chmod(f, 0o640)
    groups = []
    assert _copy_peeking(f, lambda st: groups.append(st.st_gid)).outcome is FileOutcome.SWAPPED
    st = os.lstat(f)
    assert groups == [1234] and (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 1234, 0o640)


def _chattr(flag: str, path) -> bool:
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


def test_nodump_is_kept_and_immutable_or_append_only_files_are_left_alone(richfs):
    f = richfs / "nd"
    f.write_bytes(b"n" * 3000)
    if not _chattr("+d", f):
        pytest.fail("this tmpfs takes no inode flags (Linux 6.0+ does)")
    assert copy(f).outcome is FileOutcome.SWAPPED
    assert "d" in subprocess.run(["lsattr", "-d", str(f)], capture_output=True, text=True).stdout.split()[0]
    for flag in ("+i", "+a"):
        g = richfs / f"locked{flag[1]}"
        g.write_bytes(b"l" * 3000)
        ino = os.lstat(g).st_ino
        assert _chattr(flag, g)
        try:
            res = copy(g)
            assert res.outcome is FileOutcome.PROTECTED and os.lstat(g).st_ino == ino, res
            assert temp_leftovers(richfs) == []
        finally:
            _chattr(flag.replace("+", "-"), g)
