"""Build test trees: the awkward mix a file server holds."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

AWKWARD_NAMES = [
    b"with space.txt",
    b"new\nline",
    b"-leading-dash",
    b"--help",
    b"non-utf8-\xff\xfe.bin",
    b"\xe2\x98\x83 snowman",
    b"n" * 251 + b".255",  # 255 bytes
    b"*glob?[x]",
]


def mixed_tree(root: Path, *, small: int = 2000, large: int = 6, large_mib: tuple[int, int] = (6, 12),
               seed: int = 7, xattrs: bool = True) -> dict:
    """Many small files in nested dirs, some large ones, sparse files, symlinks, hardlinks, a fifo,
    awkward names, odd modes and owners, xattrs/ACLs where the file system has them."""
    rng = random.Random(seed)
    r = os.fsencode(root)
    os.makedirs(r, exist_ok=True)
    dirs = [r]
    for i in range(12):
        parent = rng.choice(dirs)
        d = os.path.join(parent, b"dir %02d" % i if i % 3 == 0 else b"d%02d" % i)
        os.makedirs(d, exist_ok=True)
        dirs.append(d)
    total = 0
    for i in range(small):
        d = dirs[i % len(dirs)]
        n = rng.randint(1, 16) * 1024 + rng.randint(0, 1023)
        p = os.path.join(d, b"small%05d" % i)
        with open(p, "wb") as f:
            f.write(rng.randbytes(n))
        total += n
    for i in range(large):
        n = rng.randint(*large_mib) * 2**20
        p = os.path.join(dirs[(i * 5) % len(dirs)], b"large%d.bin" % i)
        with open(p, "wb") as f:
            for _ in range(n // 2**20):
                f.write(rng.randbytes(2**20))
        total += n
    for i, name in enumerate(AWKWARD_NAMES):
        p = os.path.join(dirs[i % len(dirs)], name)
        with open(p, "wb") as f:
            f.write(rng.randbytes(rng.randint(0, 50000)))
    # sparse files: data, a hole, data, a hole to the end
    for i in range(3):
        p = os.path.join(dirs[i], b"sparse%d" % i)
        with open(p, "wb") as f:
            f.write(rng.randbytes(70000))
            f.seek(8 * 2**20)
            f.write(rng.randbytes(5000))
            f.truncate(20 * 2**20)
    # an empty file, symlinks (to a file, to a dir, dangling), hardlinks (same dir, across dirs)
    open(os.path.join(r, b"empty"), "wb").close()
    os.symlink(b"small00000", os.path.join(r, b"link-to-file"))
    os.symlink(b"d01", os.path.join(r, b"link-to-dir"))
    os.symlink(b"/nonexistent/target", os.path.join(r, b"dangling"))
    h1 = os.path.join(dirs[1], b"small00001")
    os.link(h1, os.path.join(dirs[1], b"hardlink-same-dir"))
    os.link(h1, os.path.join(dirs[2], b"hardlink-other-dir"))
    os.mkfifo(os.path.join(r, b"a-fifo"))
    # modes and owners
    for i, d in enumerate(dirs[1:6]):
        p = os.path.join(d, b"small%05d" % (i + 1 + len(dirs)))
        if os.path.exists(p):
            os.chown(p, 1000 + i, 2000 + i)
            os.chmod(p, [0o600, 0o644, 0o4755, 0o2750, 0o400][i])
    if xattrs:
        p = os.path.join(dirs[3], b"small00003")
        try:
            os.setxattr(p, "user.origin", b"treegen")
            subprocess.run(["setfacl", "-m", "u:nobody:r", os.fsdecode(p)], check=True, capture_output=True)
        except OSError:
            pass  # no xattrs here (zfs-fuse): nothing to keep
        except subprocess.CalledProcessError:
            pass
    # times: old mtimes in ns (file systems that keep only seconds round them; the manifest compares
    # what the file system keeps)
    for i, d in enumerate(dirs):
        for name in sorted(os.listdir(d))[:20]:
            p = os.path.join(d, name)
            if os.path.isfile(p) and not os.path.islink(p):
                os.utime(p, ns=(1_600_000_000_000_000_000 + i, 1_500_000_000_123_456_789 + i * 1000))
    return {"dirs": len(dirs), "bytes": total}


def flat_tree(root: Path, count: int, size: tuple[int, int], seed: int = 1, per_dir: int = 1000) -> int:
    """``count`` files of random size in ``size`` (bytes), ``per_dir`` per directory."""
    rng = random.Random(seed)
    total = 0
    for i in range(count):
        d = root / f"d{i // per_dir:04d}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        n = rng.randint(*size)
        (d / f"f{i:07d}").write_bytes(rng.randbytes(n) if n else b"")
        total += n
    return total
