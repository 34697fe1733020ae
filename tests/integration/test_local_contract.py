"""One contract for the local ZFS backends (pyzfs where it loads, the zfs command always), run
against every backend available on this machine."""

import pytest
from zfsenv import sh

from rebal.replicate.local import LocalError, available_backends, local_snapshots

pytestmark = [pytest.mark.zfs, pytest.mark.lane]

BACKENDS = available_backends()


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request, make_pool):
    pool = make_pool([[]], size="128M")
    sh("zfs", "create", f"{pool.name}/d")
    sh("zfs", "create", f"{pool.name}/d/kid")
    request.node.pool = pool
    return request.param, pool


def test_snapshot_atomic_and_recursive(backend):
    b, pool = backend
    b.snapshot([f"{pool.name}/d@one"])
    assert b.exists(f"{pool.name}/d@one") and not b.exists(f"{pool.name}/d/kid@one")
    b.snapshot([f"{pool.name}/d@two"], recursive=True)
    assert b.exists(f"{pool.name}/d@two") and b.exists(f"{pool.name}/d/kid@two")
    assert [s.name for s in local_snapshots(f"{pool.name}/d")] == ["one", "two"]
    assert not b.exists(f"{pool.name}/d@nope")


def test_hold_keeps_a_snapshot_until_released(backend):
    b, pool = backend
    snap = f"{pool.name}/d@held"
    b.snapshot([snap])
    b.hold("rebal-test", [snap])
    assert sh("zfs", "destroy", snap, check=False).returncode != 0  # held: cannot go
    assert b.exists(snap)
    b.release("rebal-test", [snap])
    b.release("rebal-test", [snap])  # releasing a hold that is gone is not an error
    sh("zfs", "destroy", snap)
    assert not b.exists(snap)


def test_bookmark_or_a_clear_refusal(backend):
    b, pool = backend
    b.snapshot([f"{pool.name}/d@bm"])
    try:
        b.bookmark(f"{pool.name}/d@bm", f"{pool.name}/d#bm")
    except LocalError as e:
        assert "no bookmarks" in str(e)  # zfs-fuse (pool v23)
    else:
        assert b.exists(f"{pool.name}/d#bm")


def test_bad_names_never_reach_zfs(backend):
    b, pool = backend
    from rebal.errors import UsageError

    with pytest.raises(UsageError):
        b.snapshot([f"{pool.name}/d@-o"])
