"""Which dataset holds a directory, from /proc/self/mountinfo as real OpenZFS 2.4.4 wrote it
(tests/fixtures/openzfs/README.md: a space in a mount point, a bind mount, a mounted snapshot)."""

import os

from conftest import fixture_text

from rebal.zfs.host import ZfsHost
from rebal.zfs.queries import mounted_dataset

MI = fixture_text("mounts-bind-space-snapshot_proc-self-mountinfo.txt")


def dev(minor: int) -> int:
    return os.makedev(0, minor)


def test_the_dataset_mounted_with_the_device_number_is_named():
    assert mounted_dataset(MI, dev(50), "/var/tmp/rebal-rwbench/mnt/data/d000") == \
        ("rwbench/data", "/var/tmp/rebal-rwbench/mnt/data")
    assert mounted_dataset(MI, dev(49), "/var/tmp/rebal-rwbench/mnt") == ("rwbench", "/var/tmp/rebal-rwbench/mnt")


def test_an_escaped_space_is_read_back_and_the_bind_mount_is_not_the_root():
    assert mounted_dataset(MI, dev(51), "/var/tmp/rebal-rwbench/with space/sub") == \
        ("rwbench/sp", "/var/tmp/rebal-rwbench/with space")
    # reached through the bind mount only: no line names the dataset's root there, zfs list decides
    assert mounted_dataset(MI, dev(51), "/mnt/bind/x") is None


def test_snapshots_other_devices_and_other_file_systems_are_left_to_zfs_list():
    assert mounted_dataset(MI, dev(52), "/var/tmp/rebal-rwbench/mnt/data/.zfs/snapshot/s1") is None
    assert mounted_dataset(MI, dev(50), "/elsewhere") is None  # the path is not under its mount point
    assert mounted_dataset(MI, dev(99), "/var/tmp/rebal-rwbench/mnt/data") is None
    assert mounted_dataset("garbage line\n\n", dev(50), "/") is None


def test_dataset_for_path_falls_back_to_zfs_list_where_mountinfo_does_not_say(tmp_path):
    """zfs-fuse mounts as "fuse": the answer comes from `zfs list` and the mount points' devices."""
    from rebal.process.command import Result

    calls = []

    def runner(argv, **kw):
        calls.append(tuple(argv))
        return Result(tuple(argv), 0, f"tank\t-\ntank/ds\t{tmp_path}\n", "")

    z = ZfsHost.here(runner)
    z.mountinfo = str(tmp_path / "no-such-file")
    assert z.dataset_for_path(str(tmp_path)) == ("tank/ds", str(tmp_path))
    assert calls and calls[0][:2] == ("zfs", "list")
    calls.clear()
    mi = tmp_path / "mountinfo"
    st = os.stat(tmp_path)
    mi.write_text(f"53 49 {os.major(st.st_dev)}:{os.minor(st.st_dev)} / {tmp_path} rw - zfs tank/other rw\n")
    z.mountinfo = str(mi)
    assert z.dataset_for_path(str(tmp_path / ".")) == ("tank/other", str(tmp_path))
    assert calls == []  # no process when the kernel's table names it
