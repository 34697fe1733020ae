"""`rebal where` on a grown zfs-fuse pool, checked against zdb read independently (issue 15)."""

import json
import os
import re
from collections import Counter

import pytest
from conftest import rebal, rebal_json
from treegen import mixed_tree
from zfsenv import sh, write_cfg

pytestmark = [pytest.mark.zfs, pytest.mark.lane]


def zdb_blocks(ds: str, ino: int) -> Counter:
    """This test's own reading of zdb: vdev id -> bytes of the file's level-0 blocks."""
    out = sh("zdb", "-ddddd", ds, str(ino)).stdout
    c: Counter = Counter()
    for line in out.splitlines():
        m = re.match(r"^\s*[0-9a-f]+\s+L0\s+((?:\d+:[0-9a-f]+:[0-9a-f]+\s+)+)", line)
        if m:
            for dva in m.group(1).split():
                vdev, _off, asize = dva.split(":")
                c[int(vdev)] += int(asize, 16)
    return c


def vdev_paths(pool: str) -> dict[int, str]:
    out = sh("zdb", "-C", pool).stdout
    ids = {}
    cur = None
    for line in out.splitlines():
        m = re.match(r"^ {12}children\[(\d+)\]:", line)
        if m:
            cur = int(m.group(1))
        m = re.match(r"^ {16}path: '(.+)'", line)
        if m and cur is not None and cur not in ids:
            ids[cur] = m.group(1)
    return ids


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_where_agrees_with_zdb_and_sees_the_rebalance_spread_blocks(make_pool, tmp_path):
    pool = make_pool([[], []], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    mixed_tree(data, small=150, large=3, large_mib=(4, 6), seed=3, xattrs=False)
    pool.add(str(pool.disk("128M")), str(pool.disk("128M")))
    cfg = write_cfg(tmp_path)
    sh("zpool", "sync", pool.name, check=False)
    before = rebal_json("where", str(data), config=cfg)
    assert before["files"] == before["sampled_files"] > 150 and before["measured_bytes"] > 12 << 20, before
    shares = {v["name"]: v["share"] for v in before["vdevs"]}
    new = [str(d) for d in pool.disks[2:]]
    assert all(shares[n] == 0 for n in new), shares  # written before the add: nothing on the new vdevs
    assert abs(sum(shares.values()) - 1) < 0.01
    # a few files, each against this test's own reading of zdb
    paths = vdev_paths(pool.name)
    files = sorted((p for p in data.rglob("*") if p.is_file() and not p.is_symlink()), key=lambda p: -p.stat().st_size)
    for f in files[:2] + files[-30::10]:
        one = rebal_json("where", str(f), config=cfg)
        want = {paths[i]: n for i, n in zdb_blocks(f"{pool.name}/data", f.stat().st_ino).items()}
        have = {v["name"]: v["bytes"] for v in one["vdevs"] if v["bytes"]}
        assert have == want, (f, have, want)
    # a sample says so and gives an interval that holds the measured share
    s = rebal_json("where", str(data), "--sample", "40", "--seed", "7", config=cfg)
    assert s["sampled_files"] == 40 and any("largest file(s) measured whole and a random sample of" in n
                                            for n in s["notes"]), s
    for v in s["vdevs"]:
        assert "ci95" in v and abs(v["share"] - shares[v["name"]]) <= max(2 * v["ci95"], 0.05), (v, shares)
    # after rewriting everything, the blocks are spread over all four vdevs
    rebal("rebalance", f"{pool.name}/data", "--all", "--method", "copy", "--json", config=cfg)
    after = rebal_json("where", str(data), config=cfg)
    assert all(v["share"] > 0.1 for v in after["vdevs"]), after["vdevs"]
    assert sum(v["share"] for v in after["vdevs"] if v["name"] in new) > 0.3, after["vdevs"]


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_where_errors_are_clear(make_pool, tmp_path):
    cfg = write_cfg(tmp_path)
    r = rebal("where", "/nonexistent/x", config=cfg, check=False)
    assert r.returncode == 2 and "No such file" in r.stderr
    r = rebal("where", str(tmp_path), config=cfg, check=False)
    assert r.returncode == 2 and "not on a mounted ZFS file system" in r.stderr, r.stderr
    pool = make_pool([[]], size="64M")
    (pool.mountpoint / "f").write_bytes(os.urandom(1000))
    import shutil

    env_path = tmp_path / "bin"  # zfs and zpool, but no zdb
    env_path.mkdir()
    for tool in ("zfs", "zpool"):
        os.symlink(shutil.which(tool), env_path / tool)
    r = rebal("where", str(pool.mountpoint / "f"), config=cfg, check=False,
              env={"PATH": f"{env_path}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 3 and "zdb is not installed" in r.stderr, r.stderr
    assert json.loads(rebal("where", str(pool.mountpoint / "f"), "--json", config=cfg).stdout)["files"] == 1
