"""A rewritten file's metadata, bit for bit as the original's: who may read it never widens.

A new file does not start as a blank: it takes the directory's default ACL (which grants users the
original never granted), a setgid directory's group, and the creator's umask. So the copy is made
owner-only (``TEMP_MODE``: the default ACL's named entries get no rights through the mask while the
data is written), given the original's owner and group before any byte of data, and at the end
carries exactly the original's xattrs: what it inherited and the original lacks is removed. The
inode flags that mean something to an admin (nodump, noatime, ...) are copied; a file that is
immutable or append-only is not rewritten at all (its flags forbid replacing it, and rebal will not
lift them).
"""

from __future__ import annotations

import array
import errno
import fcntl
import os
import stat

TEMP_MODE = 0o600  # the copy while it is written: its owner's alone (an ACL's mask follows it)

_GETFLAGS, _SETFLAGS = 0x80086601, 0x40086602  # FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (the kernel reads an int)
IMMUTABLE, APPEND = 0x10, 0x20  # FS_IMMUTABLE_FL, FS_APPEND_FL
# flags the copy takes over: nodump, noatime, sync, dirsync, compression hints, no-CoW, project inherit...
# (never immutable/append-only, which would refuse the swap; never what only the file system sets)
_COPIED = 0x00000001 | 0x00000004 | 0x00000008 | 0x00000040 | 0x00000080 | 0x00000400 | 0x00004000 | 0x00800000

_NO_XATTRS: set[int] = set()  # devices whose file system said it has no xattrs


def flags(fd: int) -> int:
    """The inode flags (chattr's letters) of ``fd``, 0 where the file system has none."""
    buf = array.array("i", [0])
    try:
        fcntl.ioctl(fd, _GETFLAGS, buf, True)
    except OSError as e:
        if e.errno in (errno.ENOTTY, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise
    return buf[0]


def protected(fd: int) -> str | None:
    """Why the file behind ``fd`` must not be rewritten, or None."""
    f = flags(fd)
    if f & IMMUTABLE:
        return "immutable (chattr +i): left as it is"
    if f & APPEND:
        return "append-only (chattr +a): left as it is"
    return None


def listxattr(fd: int, dev: int) -> list[str]:
    if dev in _NO_XATTRS:
        return []
    try:
        return os.listxattr(fd)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.ENOSYS):
            _NO_XATTRS.add(dev)
            return []  # a file system without xattrs: nothing to copy
        raise


def take_owner(dst: int, st: os.stat_result, tst: os.stat_result) -> None:
    """The copy's owner and group as the original's, before any data is written (a setgid directory
    gives it the directory's group)."""
    if (tst.st_uid, tst.st_gid) != (st.st_uid, st.st_gid):
        os.fchown(dst, st.st_uid, st.st_gid)


def copy_metadata(src: int, dst: int, st: os.stat_result) -> None:
    """Xattrs (POSIX ACLs included) exactly the original's, inode flags, mode, then atime/mtime."""
    mode = stat.S_IMODE(st.st_mode)
    theirs = set(listxattr(src, st.st_dev))
    for name in sorted(theirs):
        try:
            value = os.getxattr(src, name)
        except OSError as e:
            if e.errno in (errno.ENODATA, errno.ENOTSUP):
                continue
            raise
        os.setxattr(dst, name, value)
    for name in set(listxattr(dst, st.st_dev)) - theirs:  # inherited (a default ACL), never the original's
        try:
            os.removexattr(dst, name)
        except OSError as e:
            if e.errno != errno.ENODATA:
                raise
    want = flags(src) & _COPIED
    if want and flags(dst) & _COPIED != want:
        fcntl.ioctl(dst, _SETFLAGS, array.array("i", [(flags(dst) & ~_COPIED) | want]), True)
    os.fchmod(dst, mode)  # after the chown (which clears set-id bits) and the ACL (which sets the group bits)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
