"""The gate's rsync server: written where it was checked, and nothing on the backup host made runnable.

check.py checks an rsync line by its words; this module makes those words true when rsync runs:
- the destination is opened from the root's mount point one component at a time, never following a
  symlink, and rsync starts inside the directory opened (its destination becomes relative to it), so
  a directory swapped for a symlink after the check is not where rsync writes;
- the process that becomes rsync is confined by Landlock to the mount point's tree (confine.py): no
  write, creation, removal, rename or link outside it, whatever path a later swap makes, and no
  device node, fifo or socket anywhere;
- on a mount that lets setuid programs run (the root's `setuid=on`, or any zfs-fuse mount) the
  setuid/setgid bits and file capabilities a sender asks for are not set (`--chmod=ug-s`, no
  `security.capability` xattr): a broken-into file server cannot plant a root program on the backup
  host. Where the mount is nosuid (`zfs set setuid=off`), they are kept as sent: they cannot run there.
"""

from __future__ import annotations

import os

from .confine import Unconfinable, open_beneath, writes_beneath
from .check import Refused

# what rsync receives from a sender that could give a program root on the backup host
STRIP_PRIVILEGE = ["--chmod=ug-s", "--filter=-x security.capability"]


def lexical_rel(mountpoint: str, dest: str) -> str:
    """``dest`` below ``mountpoint`` by its words (no symlink resolved), or Refused."""
    mp = os.path.normpath(mountpoint)
    d = os.path.normpath(dest)
    if d == mp:
        return ""
    if not d.startswith(mp.rstrip("/") + "/"):
        raise Refused(f"rsync: {dest} is outside {mountpoint} (by its own words, not through a symlink)")
    return d[len(mp.rstrip("/")) + 1:]


def prepare(stage: list[str], mountpoint: str) -> tuple[list[str], int, list[str]]:
    """The rsync stage to exec (destination made relative, privilege stripped where the mount would
    honour it), the directory fd to start in, and what was changed (for the log). The caller confines
    and changes into the fd just before the exec (``enter``)."""
    if len(stage) < 4 or stage[-2] != ".":
        raise Refused("rsync: '.' and the destination must be its last two words")
    dest = stage[-1]
    rel = lexical_rel(mountpoint, dest)
    try:
        fd, rest = open_beneath(mountpoint, rel)
    except OSError as e:
        raise Refused(f"rsync: {dest}: {e.strerror or e}") from None
    notes = []
    flags = os.fstatvfs(fd).f_flag
    extra = []
    if not flags & os.ST_NOSUID:
        extra = STRIP_PRIVILEGE
        notes.append("setuid/setgid bits and file capabilities not kept (the backup's mount is not nosuid: "
                     "zfs set setuid=off on the gate's root keeps them, inert)")
    new_dest = (rest or ".") + ("/" if dest.endswith("/") and rest else "")
    return [*stage[:-2], *extra, stage[-2], new_dest], fd, notes


def enter(dir_fd: int, mountpoint: str) -> None:
    """Confine this process to ``mountpoint``'s tree and move into ``dir_fd`` (just before exec)."""
    root = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        writes_beneath(root)
    except Unconfinable as e:
        raise Refused(f"rsync: cannot confine the rsync server to {mountpoint}: {e.strerror}; an rsync job "
                      "through a gate needs a kernel with Landlock (or use a zfs job)") from None
    finally:
        os.close(root)
    os.fchdir(dir_fd)
    os.close(dir_fd)
