"""A rewrite on OpenZFS 2.4.4 (acltype=posix, xattr=sa) leaves who may read a file as it was, bit for
bit (issue 63): a default ACL of the directory, a setgid directory's group, nodump, and immutable or
append-only files, checked with the file system's own tools (getfacl, lsattr, setpriv)."""

import os
import stat
import subprocess

import pytest
from zfsenv import sh

pytestmark = pytest.mark.openzfs


def _copy(path: str):
    from rebal.rebalance.copier import Copier, FileRef  # (imported in the guest: the host's lane has no xxhash)

    st = os.lstat(path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        return Copier().copy(dfd, FileRef.from_stat(os.fsencode(os.path.dirname(path)),
                                                    os.fsencode(os.path.basename(path)), st))
    finally:
        os.close(dfd)


def _acl(path: str) -> str:
    return subprocess.run(["getfacl", "-cp", path], capture_output=True, text=True, check=True).stdout


def test_a_rewrite_never_widens_who_may_read_a_file(make_pool):
    from rebal.rebalance.copier import FileOutcome

    pool = make_pool([[]], size="256M")
    ds = f"{pool.name}/acl"
    sh("zfs", "create", "-o", "acltype=posix", "-o", "xattr=sa", ds)
    root = sh("zfs", "get", "-H", "-o", "value", "mountpoint", ds).stdout.strip()
    shared = os.path.join(root, "shared")
    os.mkdir(shared)
    secret = os.path.join(shared, "secret")
    with open(secret, "wb") as f:
        f.write(os.urandom(200_000))
    os.chown(secret, 1000, 1234)
    os.chmod(secret, 0o640)
    subprocess.run(["setfacl", "-d", "-m", "u:1001:rwx", shared], check=True)  # after the file: it has no ACL
    sgid = os.path.join(root, "sgid")
    os.mkdir(sgid)
    os.chown(sgid, 0, 100)
    os.chmod(sgid, 0o2775)
    g = os.path.join(sgid, "f")
    with open(g, "wb") as f:
        f.write(os.urandom(100_000))
    os.chown(g, 1000, 1234)
    os.chmod(g, 0o640)
    nd = os.path.join(root, "nodump")
    with open(nd, "wb") as f:
        f.write(b"n" * 5000)
    subprocess.run(["chattr", "+d", nd], check=True)
    acl_before = _acl(secret)

    for p in (secret, g, nd):
        ino = os.lstat(p).st_ino
        assert _copy(p).outcome is FileOutcome.SWAPPED and os.lstat(p).st_ino != ino, p
    assert _acl(secret) == acl_before and "user:1001" not in _acl(secret)
    r = subprocess.run(["setpriv", "--reuid=1001", "--regid=1001", "--clear-groups", "cat", secret], capture_output=True)
    assert r.returncode != 0, "uid 1001 reads a file it could not read before the rewrite"
    st = os.lstat(g)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 1234, 0o640)
    assert "d" in subprocess.run(["lsattr", "-d", nd], capture_output=True, text=True).stdout.split()[0]
    for flag in ("+i", "+a"):
        locked = os.path.join(root, f"locked{flag[1]}")
        with open(locked, "wb") as f:
            f.write(b"l" * 5000)
        subprocess.run(["chattr", flag, locked], check=True)
        try:
            assert _copy(locked).outcome is FileOutcome.PROTECTED
        finally:
            subprocess.run(["chattr", flag.replace("+", "-"), locked], check=True)
