"""`rebal status` on real zfs-fuse pools, checked against `zpool iostat -v` read independently here."""

import json
import os
import re
import subprocess

import pytest
from conftest import rebal, rebal_json
from zfsenv import sh

pytestmark = pytest.mark.zfs

UNIT = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}


def to_bytes(s: str) -> int:
    m = re.fullmatch(r"([\d.]+)([KMGT]?)", s)
    return int(float(m.group(1)) * 1024 ** UNIT[m.group(2)])


def tolerance(s: str) -> int:
    """Half a unit of the last printed digit of a zpool human figure."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)", s)
    decimals = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
    return int(0.5 * 10**-decimals * 1024 ** UNIT[m.group(2)]) + 1


def iostat_top_level(pool: str) -> list[tuple[str, str, str]]:
    """(name, alloc, free) of the top-level rows of `zpool iostat -v POOL`, in order."""
    out = sh("zpool", "iostat", "-v", pool).stdout.splitlines()
    rows = []
    for line in out:
        if line.startswith("  ") and not line.startswith("    "):
            name, alloc, free = line.split()[:3]
            rows.append((name, alloc, free))
    return rows


def write(path, mib: int) -> None:
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(2**20))
        f.flush()
        os.fsync(f.fileno())


def settle() -> None:
    # zfs-fuse has no `zpool sync`; a global sync commits the open transaction group
    subprocess.run(["sync"], check=True)


def check_against_iostat(pool, cfg_file, expect_names):
    data = rebal_json("status", pool.name, config=cfg_file)
    [p] = data["pools"]
    # zfs-fuse prints log vdevs inline after the data vdevs; they are not data vdevs
    rows = iostat_top_level(pool.name)[: len(p["vdevs"])]
    assert [v["name"] for v in p["vdevs"]] == expect_names
    assert len(rows) == len(p["vdevs"])
    for v, (_, alloc, free) in zip(p["vdevs"], rows):
        assert abs(v["alloc"] - to_bytes(alloc)) <= tolerance(alloc), (v, alloc)
        assert abs(v["free"] - to_bytes(free)) <= tolerance(free), (v, free)
        assert v["size"] == v["alloc"] + v["free"]
        assert v["cap"] == pytest.approx(100 * v["alloc"] / v["size"], abs=0.01)
    caps = [v["cap"] for v in p["vdevs"]]
    assert p["spread"] == pytest.approx(max(caps) - min(caps), abs=0.02)
    return p


def test_single_disks_grown_by_zpool_add(make_pool, cfg_file):
    pool = make_pool([[], []])
    write(pool.mountpoint / "a", 120)
    settle()
    before = check_against_iostat(pool, cfg_file, [str(d) for d in pool.disks])
    assert before["spread"] < 5
    pool.add(str(pool.disk()), str(pool.disk()))
    after = check_against_iostat(pool, cfg_file, [str(d) for d in pool.disks])
    # two old vdevs hold ~60 MiB each of 250 MiB; the new ones are empty: spread ~ 24 points
    assert 15 < after["spread"] < 35
    assert after["over_target"] is True and after["target_spread"] == 10.0
    assert [v["type"] for v in after["vdevs"]] == ["file"] * 4


def test_mirrors(make_pool, cfg_file):
    pool = make_pool([["mirror", 2], ["mirror", 2]])
    write(pool.mountpoint / "a", 60)
    settle()
    p = check_against_iostat(pool, cfg_file, ["mirror-0", "mirror-1"])
    assert [v["type"] for v in p["vdevs"]] == ["mirror", "mirror"]
    assert p["vdevs"][0]["devices"] == [str(pool.disks[0]), str(pool.disks[1])]


def test_raidz1_with_log_and_spare(make_pool, cfg_file):
    pool = make_pool([["raidz1", 3]])
    pool.add("raidz1", *[str(pool.disk()) for _ in range(3)])
    log_dev = str(pool.disk())
    pool.add("log", log_dev)
    spare_dev = str(pool.disk())
    pool.add("spare", spare_dev)
    write(pool.mountpoint / "a", 40)
    settle()
    p = check_against_iostat(pool, cfg_file, ["raidz1-0", "raidz1-1"])
    assert [v["type"] for v in p["vdevs"]] == ["raidz1", "raidz1"]
    assert [(v["name"], v["class"]) for v in p["other_vdevs"]] == [(log_dev, "log"), (spare_dev, "spare")]
    assert iostat_top_level(pool.name)[2][0] == log_dev


def test_status_records_a_sample_and_history_reads_it(make_pool, cfg_file):
    pool = make_pool([[], []])
    rebal("status", pool.name, config=cfg_file)
    write(pool.mountpoint / "a", 30)
    settle()
    rebal("status", pool.name, config=cfg_file)
    hist = rebal_json("history", pool.name, config=cfg_file)
    assert len(hist["samples"]) == 2
    first, second = hist["samples"]
    assert set(second["vdevs"]) == {str(d) for d in pool.disks}
    assert sum(v["alloc"] for v in second["vdevs"].values()) > sum(v["alloc"] for v in first["vdevs"].values())
    table = rebal("history", pool.name, config=cfg_file).stdout
    assert "CAP over time" in table and "d0" in table
    assert rebal_json("history", pool.name, "--since", "2099-01-01", config=cfg_file)["samples"] == []


def test_human_table(make_pool, cfg_file):
    pool = make_pool([[], []])
    out = rebal("status", pool.name, config=cfg_file).stdout
    assert pool.name in out and "spread" in out and "d0" in out and "d1" in out


def test_no_such_pool(zfs_ready, cfg_file):
    r = rebal("status", "rbtnosuchpool", config=cfg_file, check=False)
    assert r.returncode == 5
    assert r.stderr.startswith("rebal: error: no such pool: rbtnosuchpool")
    assert len(r.stderr.strip().splitlines()) == 1


def test_zpool_not_installed(cfg_file, tmp_path):
    # a PATH without any ZFS tools: the real "not installed" path, no fake
    env = {"PATH": str(tmp_path)}
    r = rebal("status", config=cfg_file, check=False, env=env)
    assert r.returncode == 3
    assert r.stderr.strip() == "rebal: error: zpool is not installed (or not on PATH); install ZFS first"


def test_status_answers_good_and_bad_command_lines_plainly(make_pool, tmp_path):
    """Every way of naming the config and the pools works; a missing pool, a bad name and a bad or
    missing config are each one error line and a non-zero exit, never a traceback; every successful
    status records its sample, with a replication job in the config (status reads its last success)."""
    pool = make_pool([[], []])
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\npools = ["{pool.name}"]\n'
                   f'[[replicate]]\nname = "n"\nsource = "{pool.name}"\ntarget = "backup/x"\ntarget_host = "127.0.0.1"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('state_db = 5\n')
    good = [
        ["--config", str(cfg), "status"],
        ["--config", str(cfg), "status", "--json"],
        [f"--config={cfg}", "status", pool.name, "--json"],
        ["-c", str(cfg), "status", "--json", pool.name],
    ]
    for argv in good:
        r = rebal(*argv)
        if "--json" in argv:
            assert [p["name"] for p in json.loads(r.stdout)["pools"]] == [pool.name]
        else:
            assert pool.name in r.stdout
    refused = {
        ("--config", str(cfg), "status", "rbtnosuchpool"): "rbtnosuchpool",
        ("--config", str(cfg), "status", "bad/name"): "bad/name",
        ("--config", str(bad), "status"): "state_db",
        ("--config", str(tmp_path / "missing.toml"), "status"): "no such file",
    }
    for argv, said in refused.items():
        r = rebal(*argv, check=False)
        assert r.returncode not in (0, 70) and r.stdout == "", (argv, r)
        assert r.stderr.startswith("rebal: error:") and said in r.stderr and "Traceback" not in r.stderr, (argv, r.stderr)
    samples = rebal_json("history", pool.name, config=cfg)["samples"]
    assert len(samples) == len(good)  # every successful status recorded its sample, the refused none


def test_health_says_what_it_checked(make_pool, tmp_path):
    """Issue 69 (9): an OK health printed one line, not what the README says it checks. It lists each
    pool and job it looked at, with the figures, found wrong or not (and `checked` in --json)."""
    pool = make_pool([[], []])
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\npools = ["{pool.name}"]\n')
    r = rebal("health", config=cfg, check=False)
    assert f"pool {pool.name}: ONLINE, CAP" in r.stdout and "over 2 data vdev(s)" in r.stdout, r.stdout
    assert r.returncode != 0 or r.stdout.startswith("OK: every check passed"), r.stdout
    j = json.loads(rebal("health", "--json", config=cfg, check=False).stdout)
    assert [c["pool"] for c in j["checked"]] == [pool.name] and j["checked"][0]["vdevs"] == 2, j
