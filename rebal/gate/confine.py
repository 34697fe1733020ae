"""Confine the gate's rsync server to one directory tree, by the directory's inode, not its name.

A gate checks an rsync destination, then rsync runs and enters it later, when its client says. A
second connection through the same gate (or anything else that writes into the tree) can replace a
checked directory by a symlink in between, and a check of names can never close that gap. Landlock
(Linux 5.13+) can: a rule is bound to the directory the gate opened, and the kernel refuses every
write, file creation, removal, rename and link that would land outside it, whatever path leads
there (symlinks, `..`, a swapped directory). Device nodes, fifos and sockets cannot be made at all,
inside the tree or out. Reads are left alone (rsync needs its libraries and locale).

The rules are applied to the process that then becomes rsync (execve keeps them), with
no_new_privs set (no setuid program can lift them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every Linux architecture
_VERSION = 1 << 0  # landlock_create_ruleset(NULL, 0, VERSION): the ABI the kernel speaks
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*: what is refused outside the tree (and, for the MAKE_* of special files, inside)
WRITE_FILE, READ_FILE, READ_DIR = 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM, REFER, TRUNCATE = 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14
_SPECIAL = MAKE_CHAR | MAKE_BLOCK | MAKE_FIFO | MAKE_SOCK
_TREE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct landlock_path_beneath_attr is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def abi() -> int:
    """The Landlock ABI this kernel speaks; 0 where it has none (too old, or not in the lsm= list)."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return int(v) if v > 0 else 0


class Unconfinable(OSError):
    """This kernel cannot confine a process to a tree (no Landlock)."""


def writes_beneath(dir_fd: int) -> None:
    """From now on this process (and what it execs) may create, write, remove and rename only inside
    the directory ``dir_fd`` refers to, and nowhere may it make a device node, fifo or socket."""
    version = abi()
    if version < 1:
        raise Unconfinable(errno.ENOSYS, "this kernel has no Landlock (Linux 5.13+, with landlock in lsm=)")
    handled = _TREE | _SPECIAL
    if version >= 2:
        handled |= REFER  # a rename or link across the tree's edge
    if version >= 3:
        handled |= TRUNCATE
    allowed = handled & ~_SPECIAL
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = _RulesetAttr(handled)
    rs = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                      ctypes.c_uint32(0))
    if rs < 0:
        e = ctypes.get_errno()
        raise Unconfinable(e, f"landlock_create_ruleset: {os.strerror(e)}")
    try:
        rule = _PathBeneath(allowed, dir_fd)
        if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(rs), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"landlock_add_rule: {os.strerror(e)}")
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"prctl(NO_NEW_PRIVS): {os.strerror(e)}")
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(rs), ctypes.c_uint32(0)) < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"landlock_restrict_self: {os.strerror(e)}")
    finally:
        os.close(rs)


def open_beneath(root: str, rel: str) -> tuple[int, str]:
    """Open directory ``root``, then each existing component of the relative path ``rel`` below it
    without following a symlink (O_NOFOLLOW at every step: a component that is a symlink is refused,
    not followed). Returns the deepest directory opened and the part of ``rel`` that does not exist
    yet (rsync --mkpath makes it, confined to the tree)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    try:
        for i, part in enumerate(parts):
            if part == "..":
                raise OSError(errno.EINVAL, "'..' in the destination")
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return fd, "/".join(parts[i:])
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise OSError(e.errno, f"{part} in the destination is not a directory (a symlink?)") from None
                raise
            os.close(fd)
            fd = nfd
        return fd, ""
    except BaseException:
        os.close(fd)
        raise
