"""Durability per batch (issue 14): the copier's prepare/swap split on a real tmpfs, and which file
systems get one barrier per batch. The barrier itself is proven where it is used, by power cuts of
an OpenZFS guest (tests/openzfs/test_vm_powercut.py); the batch window under SIGKILL on zfs-fuse is
in tests/integration/test_rebalance_zfs.py."""

import os
import threading
from pathlib import Path

import pytest
from fsenv import manifest, temp_leftovers

from rebal.rebalance import durable
from rebal.rebalance.copier import Copier, FileRef, FileOutcome, Prepared, tmp_name

TMPFS_MAGIC = 0x01021994


def ref_of(path: Path) -> FileRef:
    return FileRef.from_stat(os.fsencode(path.parent), os.fsencode(path.name), os.lstat(path))


@pytest.fixture
def dfd(richfs):
    fd = os.open(richfs, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_prepare_leaves_a_verified_copy_and_swap_puts_it_in_place(richfs, dfd):
    files = [richfs / f"f{i}" for i in range(5)]
    for i, f in enumerate(files):
        f.write_bytes(os.urandom(1000 * i + 1))
    before = manifest(richfs)
    c = Copier()
    prepared = [c.prepare(dfd, ref_of(f), fsync=False) for f in files]
    assert all(isinstance(p, Prepared) for p in prepared), prepared
    # before the swap: every original still in place, every copy complete under its temp name
    for f, p in zip(files, prepared):
        assert os.lstat(f).st_ino == p.ref.ino
        assert (richfs / tmp_name(p.ref.ino).decode()).read_bytes() == f.read_bytes()
    b = durable.Barrier(dfd)
    assert not b.syncfs, "tmpfs: not OpenZFS"
    b.copies([p.tmp for p in prepared])
    results = [c.swap(p) for p in prepared]
    b.renames()
    assert [x.outcome for x in results] == [FileOutcome.SWAPPED] * 5
    assert [os.lstat(f).st_ino for f in files] == [p.copy_ino for p in prepared]
    assert manifest(richfs) == before and temp_leftovers(richfs) == []
    assert all(p.src == -1 and p.tmp == -1 for p in prepared), "swap closes both descriptors"


def test_a_file_changed_between_prepare_and_swap_is_not_replaced(richfs, dfd):
    f = richfs / "busy"
    f.write_bytes(b"a" * 5000)
    c = Copier(use_lease=False)  # the unchanged-check alone (a lease would refuse the writer)
    p = c.prepare(dfd, ref_of(f), fsync=False)
    with open(f, "ab") as w:  # written to while the batch waits for its barrier
        w.write(b"b")
    res = c.swap(p)
    assert res.outcome is FileOutcome.CHANGED
    assert f.read_bytes() == b"a" * 5000 + b"b" and temp_leftovers(richfs) == []


def test_drop_removes_the_copy_and_keeps_the_original(richfs, dfd):
    f = richfs / "x"
    f.write_bytes(b"keep me")
    ino = os.lstat(f).st_ino
    c = Copier()
    p = c.prepare(dfd, ref_of(f), fsync=False)
    c.drop(p)
    assert os.lstat(f).st_ino == ino and f.read_bytes() == b"keep me" and temp_leftovers(richfs) == []


def test_a_failed_prepare_is_a_result_and_leaves_nothing(richfs, dfd):
    f = richfs / "gone"
    f.write_bytes(b"1")
    ref = ref_of(f)
    f.unlink()
    res = Copier().prepare(dfd, ref, fsync=False)
    assert not isinstance(res, Prepared) and res.outcome is FileOutcome.GONE
    stop = threading.Event()
    stop.set()
    g = richfs / "big"
    g.write_bytes(os.urandom(3 << 20))
    res = Copier(stop=stop).prepare(dfd, ref_of(g), fsync=False)
    assert res.outcome is FileOutcome.ABORTED and temp_leftovers(richfs) == []


def test_syncfs_only_on_openzfs(richfs, dfd, monkeypatch):
    assert durable.fs_type(dfd) == TMPFS_MAGIC  # read from fstatfs(2), not guessed
    assert not durable.Barrier(dfd).syncfs, "tmpfs: the copies are fsynced one after another"
    monkeypatch.setattr(durable, "fs_type", lambda fd: durable.ZFS_SUPER_MAGIC)
    b = durable.Barrier(dfd)
    assert b.syncfs, "OpenZFS: one syncfs for the batch"
    calls = []
    monkeypatch.setattr(durable, "syncfs", calls.append)
    b.copies([7, 8, 9])
    b.renames()
    assert calls == [7, dfd]


def test_per_batch_on_openzfs_unless_told(dfd, monkeypatch):
    monkeypatch.delenv("REBAL_DURABILITY", raising=False)
    tmpfs = durable.Barrier(dfd)
    assert not durable.per_batch(tmpfs), "not OpenZFS: an fsync inside each copy"
    monkeypatch.setattr(durable, "fs_type", lambda fd: durable.ZFS_SUPER_MAGIC)
    zfs = durable.Barrier(dfd)
    assert durable.per_batch(zfs), "OpenZFS: one syncfs per batch"
    monkeypatch.setenv("REBAL_DURABILITY", "file")
    assert not durable.per_batch(zfs)
    monkeypatch.setenv("REBAL_DURABILITY", "batch")
    assert durable.per_batch(tmpfs)


def test_a_barrier_that_fails_is_raised_and_a_rename_barrier_that_fails_is_not(tmp_path):
    with pytest.raises(OSError):
        durable.syncfs(987654)  # no such descriptor: EBADF
    b = durable.Barrier(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY))
    with pytest.raises(OSError):
        b.copies([987654])
    os.close(b.dfd)
    b.renames()  # a closed directory descriptor: nothing raised, nothing is at risk


def test_a_writer_is_not_held_up_until_the_batch_is_made_durable(richfs, dfd):
    """A prepared original stays open (and leased) until its batch's barrier. A writer that opens it
    meanwhile waits on the lease: the copy pass lets the file go at once instead of at the barrier
    (which could be a whole throttled batch later, or the kernel's 45 s lease-break time)."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from rebal.rebalance.copy_pass import collect
    from rebal.rebalance.files import Result

    f = richfs / "a"
    f.write_bytes(b"x" * 10000)
    c = Copier()
    p = c.prepare(dfd, ref_of(f), fsync=False)
    assert isinstance(p, Prepared) and p.leased, "tmpfs takes leases (as root)"
    ready, rest_of_batch = Future(), Future()
    ready.set_result(p)

    def writer():  # the rest of the batch ends only once the writer got the file
        with open(f, "ab") as w:
            w.write(b"y")
        rest_of_batch.set_result(Result(FileOutcome.SWAPPED))

    t = threading.Thread(target=writer)
    t.start()
    out = collect(SimpleNamespace(copier=c), [ready, rest_of_batch])
    t.join()
    assert out[0].outcome is FileOutcome.IN_USE, out[0]
    assert f.read_bytes() == b"x" * 10000 + b"y" and os.lstat(f).st_ino == p.ref.ino
    assert temp_leftovers(richfs) == []
