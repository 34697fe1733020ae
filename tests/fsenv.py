"""A real file system with xattrs, POSIX ACLs, ns timestamps and holes: a tmpfs mounted for the test."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path


def mount_tmpfs(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "rebal-test", str(where)], check=True, capture_output=True)


def umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def manifest(root: Path, content: bool = True, exclude: tuple[str, ...] = ()) -> dict:
    """Everything rebal must keep, per path: type, size, content hash, mode, owner, mtime (ns),
    xattrs, symlink target, and hardlink groups (as the set of names sharing an inode).
    ``exclude``: paths relative to ``root`` left out with everything below them."""
    root_b = os.fsencode(root)
    skip = {os.fsencode(e) for e in exclude}
    out: dict = {}
    groups: dict[int, list[bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root_b):
        dirnames.sort()
        if dirpath == root_b and b".zfs" in dirnames:
            dirnames.remove(b".zfs")
        dirnames[:] = [d for d in dirnames if os.path.relpath(os.path.join(dirpath, d), root_b) not in skip]
        for name in dirnames + sorted(filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root_b)
            entry = {
                "type": stat.S_IFMT(st.st_mode),
                "mode": stat.S_IMODE(st.st_mode),
                "uid": st.st_uid,
                "gid": st.st_gid,
                "mtime_ns": st.st_mtime_ns,
            }
            if stat.S_ISLNK(st.st_mode):
                entry["target"] = os.readlink(p)
            else:
                try:
                    entry["xattrs"] = {k: os.getxattr(p, k, follow_symlinks=False) for k in sorted(os.listxattr(p, follow_symlinks=False))}
                except OSError:
                    entry["xattrs"] = {}
            if stat.S_ISREG(st.st_mode):
                entry["size"] = st.st_size
                if content:
                    h = hashlib.sha256()
                    with open(p, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            h.update(block)
                    entry["sha256"] = h.hexdigest()
                if st.st_nlink > 1:
                    groups.setdefault(st.st_ino, []).append(rel)
            out[rel] = entry
    out["__hardlink_groups__"] = sorted(sorted(g) for g in groups.values())
    return out


def temp_leftovers(root: Path) -> list[bytes]:
    found = []
    for dirpath, _dirs, files in os.walk(os.fsencode(root)):
        for f in files:
            if f.startswith(b".rebal-"):
                found.append(os.path.join(dirpath, f))
    return found
