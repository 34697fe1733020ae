"""`rebal health` on real OpenZFS: a mirror with one side offline is CRITICAL naming the device;
a scrub that repaired corrupted data is a finding."""

import json
import os

import pytest
from conftest import rebal
from lanelib import write_random
from zfsenv import sh

pytestmark = pytest.mark.openzfs


def health(cfg):
    r = rebal("health", "--json", config=cfg, check=False)
    assert r.stdout.strip(), (r.returncode, r.stderr)  # (it once printed nothing: a pool gone mid-check)
    return r.returncode, json.loads(r.stdout)


def test_offline_side_of_a_mirror_is_critical(make_pool, cfg_file):
    pool = make_pool([["mirror", 2]], size="256M")
    sh("zpool", "offline", pool.name, str(pool.disks[1]))
    code, h = health(cfg_file)
    assert code == 2 and h["level"] == "CRITICAL"
    lines = [f["message"] for f in h["findings"] if f["level"] == "CRITICAL" and f["subject"] == pool.name]
    assert any(str(pool.disks[1]) in m and "OFFLINE" in m and "mirror-0" in m for m in lines), h
    sh("zpool", "online", pool.name, str(pool.disks[1]))
    sh("zpool", "wait", "-t", "resilver", pool.name)
    code, h = health(cfg_file)
    assert not [f for f in h["findings"] if f["level"] == "CRITICAL" and f["subject"] == pool.name], h


def test_scrub_repairs_are_a_finding(make_pool, cfg_file):
    pool = make_pool([["mirror", 2]], size="256M")
    write_random(pool.mountpoint / "f", 60)
    sh("zpool", "export", pool.name)
    # corrupt 16 MiB in the middle of one side (past the labels), as a failing disk would
    with open(pool.disks[0], "r+b") as f:
        f.seek(40 << 20)
        f.write(os.urandom(16 << 20))
    sh("zpool", "import", "-d", str(pool.dir), pool.name)
    r = rebal("scrub", pool.name, config=cfg_file)
    assert "scrub started" in r.stdout
    sh("zpool", "wait", "-t", "scrub", pool.name)
    code, h = health(cfg_file)
    msgs = [f["message"] for f in h["findings"] if f["subject"] == pool.name]
    assert any("the last scrub repaired" in m for m in msgs) or any("checksum" in m for m in msgs), h
    assert code >= 1
    assert (pool.mountpoint / "f").stat().st_size == 60 << 20


SECTOR_4K = "/dev/vdj"  # the lane's disk with 4 KiB physical sectors (lane.py: disks_4k=1)


@pytest.mark.parametrize("ashift,warned", [(9, True), (12, False)])
def test_an_ashift_below_the_disks_sector_is_said_with_the_way_out(cfg_file, ashift, warned):
    assert sh("lsblk", "-dno", "PHY-SEC", SECTOR_4K).stdout.strip() == "4096"  # the real part this relies on
    name = f"sec{os.getpid()}a{ashift}"
    sh("zpool", "create", "-f", "-o", f"ashift={ashift}", name, SECTOR_4K)
    try:
        code, h = health(cfg_file)
        said = [f["message"] for f in h["findings"] if f["subject"] == name and "physical sectors" in f["message"]]
        if warned:
            assert len(said) == 1 and "vdev 0" in said[0] and "ashift 9 (512 B sectors)" in said[0] \
                and "4096 B physical" in said[0] and f"rebal rebuild {name}" in said[0], h["findings"]
        else:
            assert said == [], said
        st = json.loads(rebal("status", name, "--json", config=cfg_file).stdout)
        assert bool(st["sectors"]) == warned, st["sectors"]
    finally:
        sh("zpool", "destroy", "-f", name)
        sh("wipefs", "-a", SECTOR_4K, check=False)
