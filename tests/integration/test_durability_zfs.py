"""Which durability call is a barrier on zfs-fuse (issue 14), proven by power cuts of the pool: the
zfs-fuse daemon holds the pool's open transaction groups and intent log in its memory, so killing it
(SIGKILL) loses what a power cut loses, while the vdev files keep what was written to them. After
each cut the daemon is started again, the pool imported and mounted, and what survived is read.

- syncfs(2) is no barrier there: a file written and syncfs'd is gone after the cut (FUSE does not
  pass syncfs on to the daemon). So rebal keeps an fsync per copy on zfs-fuse (durable.py).
- An fsync'd copy swapped in by the copier, with the directory fsynced after the swap (what the copy
  pass does before the journal drops its rows), is there after the cut: the new inode, whole.

The OpenZFS barrier (syncfs = zil_commit of every object) is proven by the lane's power cuts of the
whole guest (tests/openzfs/test_vm_powercut.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from zfsenv import sh

from rebal.rebalance import durable
from rebal.rebalance.copier import Copier, FileRef, Outcome

pytestmark = pytest.mark.zfs

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
        assert durable.fs_type(dfd) != durable.ZFS_SUPER_MAGIC
        assert durable.batch_barrier(dfd) is None, "zfs-fuse: an fsync per copy, no batch barrier"
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


def test_a_swapped_copy_survives_a_power_cut(cut_pool):
    d = cut_pool.mountpoint / "d"
    (d / "f").write_bytes(DATA)
    # the original is committed first (a sync task waits for its transaction group)
    sh("zfs", "set", "rebal:test=1", cut_pool.name)
    st = os.lstat(d / "f")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        res = Copier().copy(dfd, FileRef.from_stat(os.fsencode(d), b"f", st))
        assert res.outcome is Outcome.SWAPPED, res
        durable.after_swaps(dfd, durable.batch_barrier(dfd))
    finally:
        os.close(dfd)
    power_cut_and_back(cut_pool)
    after = os.lstat(d / "f")
    assert after.st_ino == res.copy_ino != st.st_ino, "the swap survived the cut"
    assert (d / "f").read_bytes() == DATA
    assert sorted(os.listdir(d)) == ["f"], "no temp or anchor name came back"
