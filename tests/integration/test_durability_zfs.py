"""Which durability call is a barrier on zfs-fuse (issue 14), proven by power cuts of the pool: the
zfs-fuse daemon holds the pool's open transaction groups and intent log in its memory, so killing it
(SIGKILL) loses what a power cut loses, while the vdev files keep what was written to them. After
each cut the daemon is started again, the pool imported and mounted, and what survived is read.

- syncfs(2) is no barrier there: a file written and syncfs'd is gone after the cut (FUSE does not
  pass syncfs on to the daemon), while an fsync'd one survives.
- The batch barrier rebal uses there (durable.Barrier: the batch's copies fsynced once all are
  written): a cut right after it leaves every copy of the batch whole, and copies made after it are
  lost (so the cut is real); a cut right after the swaps and the directory's fsync leaves every name
  on its new inode, whole, and no temp or anchor name.

The OpenZFS barrier (syncfs = zil_commit of every object) is proven by the lane's power cuts of the
whole guest (tests/openzfs/test_vm_powercut.py)."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from zfsenv import sh

from rebal.rebalance import durable
from rebal.rebalance.copier import Copier, FileRef, FileOutcome, Prepared, tmp_name

pytestmark = [pytest.mark.zfs, pytest.mark.alone]  # kills zfs-fuse: no other test may run meanwhile

DATA = os.urandom(1 << 20)


def power_cut_and_back(pool) -> None:
    """SIGKILL the zfs-fuse daemon, wait for it to be gone, start it again, mount everything."""
    pid = int(sh("pgrep", "-o", "-x", "zfs-fuse").stdout.split()[0])
    os.kill(pid, 9)
    # waits for the kernel to reap the killed daemon (bounded): its exit is what cuts the pool
    subprocess.run(["timeout", "30", "tail", f"--pid={pid}", "-f", "/dev/null"], check=True)
    with open("/proc/mounts") as f:
        stale = [line.split()[1] for line in f if " fuse.zfs " in line or line.startswith("/dev/fuse ")]
    for m in sorted(stale, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)
    sh("zfs-fuse")
    # zpool answers once the daemon is up (bounded by timeout(1), no fixed sleep)
    subprocess.run(["timeout", "30", "sh", "-c", "until zpool list >/dev/null 2>&1; do sleep 0.1; done"], check=True)
    if sh("zpool", "list", pool.name, check=False).returncode != 0:
        sh("zpool", "import", "-d", str(pool.dir), "-f", pool.name)
    sh("zfs", "mount", "-a", check=False)
    assert (pool.mountpoint / "d").is_dir(), "the pool's dataset is mounted again"


@pytest.fixture
def cut_pool(make_pool):
    pool = make_pool([[]], size="128M")
    sh("zfs", "create", f"{pool.name}/d")
    yield pool


def write(path: Path) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, DATA)
    return fd


def test_syncfs_is_no_barrier_on_zfs_fuse_and_fsync_is(cut_pool):
    d = cut_pool.mountpoint / "d"
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not durable.Barrier(dfd).syncfs, "zfs-fuse: the batch's copies are fsynced, no syncfs"
        fd = write(d / "synced-by-syncfs")
        durable.syncfs(fd)  # returns 0 ...
        os.close(fd)
    finally:
        os.close(dfd)
    power_cut_and_back(cut_pool)
    assert not (d / "synced-by-syncfs").exists(), "... and the file is gone: syncfs made nothing durable"
    fd = write(d / "fsynced")
    os.fsync(fd)
    os.close(fd)
    power_cut_and_back(cut_pool)
    assert (d / "fsynced").read_bytes() == DATA


def batch_of(d: Path, n: int, tag: str) -> list[FileRef]:
    refs = []
    for i in range(n):
        p = d / f"{tag}{i}"
        p.write_bytes(DATA[: 4096 + 997 * i])
        refs.append(FileRef.from_stat(os.fsencode(d), os.fsencode(p.name), os.lstat(p)))
    return refs


def commit(pool) -> None:
    """The originals committed first: a property change is a sync task, it waits for its txg."""
    sh("zfs", "set", "rebal:test=1", pool.name)
    sh("zfs", "inherit", "rebal:test", pool.name)


def prepare_all(c: Copier, dfd: int, refs: list[FileRef]) -> list[Prepared]:
    """The batch's verified copies under their temp names, none fsynced on its own."""
    prepared = [c.prepare(dfd, r, fsync=False) for r in refs]
    assert all(isinstance(p, Prepared) for p in prepared), prepared
    return prepared


@contextmanager
def in_dir(pool, n: int):
    """(directory, refs of ``n`` committed originals, a Copier, the directory's descriptor)."""
    d = pool.mountpoint / "d"
    refs = batch_of(d, n, "f")
    commit(pool)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield d, refs, Copier(), dfd
    finally:
        os.close(dfd)


def test_a_cut_right_after_the_barrier_keeps_every_copy_of_the_batch(cut_pool):
    with in_dir(cut_pool, 20) as (d, refs, c, dfd):
        late_refs = batch_of(d, 5, "late")
        prepared = prepare_all(c, dfd, refs)
        durable.Barrier(dfd).copies([p.tmp for p in prepared])
        late = prepare_all(c, dfd, late_refs)  # after the barrier: not durable
        for p in prepared + late:
            os.close(p.tmp)
            os.close(p.src)
    power_cut_and_back(cut_pool)
    for i, r in enumerate(refs):
        want = DATA[: 4096 + 997 * i]
        assert (d / f"f{i}").read_bytes() == want and os.lstat(d / f"f{i}").st_ino == r.ino, "original untouched"
        assert (d / tmp_name(r.ino).decode()).read_bytes() == want, f"copy {i} is whole after the cut"
    lost = [r for r in late_refs if (d / tmp_name(r.ino).decode()).exists()]
    assert lost == [], "copies made after the barrier are lost: the cut is a real one"


def test_a_cut_right_after_a_batch_was_swapped_keeps_every_swap(cut_pool):
    with in_dir(cut_pool, 20) as (d, refs, c, dfd):
        prepared = prepare_all(c, dfd, refs)
        b = durable.Barrier(dfd)
        b.copies([p.tmp for p in prepared])
        results = [c.swap(p) for p in prepared]
        assert [x.outcome for x in results] == [FileOutcome.SWAPPED] * 20
        b.renames()  # what the copy pass does before the journal drops the batch's rows
    power_cut_and_back(cut_pool)
    for i, (r, res) in enumerate(zip(refs, results)):
        assert os.lstat(d / f"f{i}").st_ino == res.copy_ino != r.ino, f"swap {i} survived the cut"
        assert (d / f"f{i}").read_bytes() == DATA[: 4096 + 997 * i]
    assert sorted(os.listdir(d)) == sorted(f"f{i}" for i in range(20)), "no temp or anchor name came back"
