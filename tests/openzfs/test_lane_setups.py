"""Replication setups (issue 37) on real OpenZFS: bookmark cursors, a gated backup key, chosen
datasets (patterns and the rebal:backup property), a local target resuming a cut receive, hooks,
two jobs on one source; and the four kinds of job run together from the shipped timer for three
rounds with changes between them, each verified."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import rebal, rebal_json
from lanelib import restore_etc, write_random
from replscenarios import snaps
from setupscenarios import (
    excludes_scenario,
    hooks_scenario,
    local_block,
    property_scenario,
    put,
    same,
    verified_ok,
    write_cfg,
)
from sshenv import gate_key, start_sshd
from zfsenv import sh

pytestmark = pytest.mark.openzfs


@pytest.fixture
def gated(tmp_path, zfs_ready):
    host = start_sshd(tmp_path / "sshd")
    yield host
    host.stop()


@pytest.fixture
def pools(make_pool):
    return make_pool([[], []], size="512M"), make_pool([[]], size="1G")


def bookmarks(ds: str) -> list[str]:
    out = sh("zfs", "list", "-H", "-o", "name", "-t", "bookmark", ds).stdout.split()
    return sorted(n.split("#", 1)[1] for n in out)


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_excludes_through_a_gated_key_with_bookmarks(pools, gated, tmp_path):
    src, dst = pools
    gate_key(gated, f"--receive-into {dst.name}/gate", tmp_path / "gate.log")
    sh("zfs", "create", f"{dst.name}/gate")  # a gated key receives under a dataset the admin made
    r1, r2 = excludes_scenario(src, dst, gated, tmp_path, tgt=f"{dst.name}/gate/copy", verify=False)
    assert {d["cursor"] for d in r1["datasets"]} == {"bookmark"}
    assert any("zfs create -o readonly=off" in x for x in (tmp_path / "gate.log").read_text().splitlines())
    d = f"{src.name}/data"
    for ds in (d, f"{d}/b", f"{d}/scratch/keep"):
        assert [s for s in snaps(ds) if s.startswith("rebal-")] == [], ds  # the cursor is a bookmark
        assert bookmarks(ds) == [r2["snapshot"]], ds
    assert bookmarks(f"{d}/scratch/junk") == [] and bookmarks(f"{d}/a") == [r1["snapshot"]]


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_property_selection_through_a_gated_key(pools, gated, tmp_path):
    src, dst = pools
    gate_key(gated, f"--receive-into {dst.name}/gate", tmp_path / "gate.log")
    sh("zfs", "create", f"{dst.name}/gate")
    r1, r2 = property_scenario(src, dst, gated, tmp_path, tgt=f"{dst.name}/gate/copy", verify=False)
    assert {d["cursor"] for d in r2["datasets"]} == {"bookmark"} and all(d["base_bookmark"] for d in r2["datasets"])


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_local_target_resumes_a_cut_receive(pools, tmp_path):
    """A local job's receive cut half way (the stream ended early: -s keeps a token) is resumed by the
    next run before its own snapshot, then continues incrementally; no ssh at all."""
    src, dst = pools
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    put(d, "f")
    cfg = write_cfg(tmp_path, [local_block(name="usb", source=d, target=f"{dst.name}/usb")])
    r1 = rebal_json("replicate", "usb", config=cfg)
    assert r1["outcome"] == "ok" and r1["remote_commands"] == 0 and r1["datasets"][0]["cursor"] == "bookmark", r1
    write_random(os.path.join(sh("zfs", "get", "-H", "-o", "value", "mountpoint", d).stdout.strip(), "big"), 48, seed=3)
    sh("zfs", "snapshot", f"{d}@manual")
    import subprocess

    send = subprocess.Popen(["zfs", "send", "-i", f"{d}#{r1['snapshot']}", f"{d}@manual"], stdout=subprocess.PIPE)
    head = subprocess.Popen(["head", "-c", str(8 << 20)], stdin=send.stdout, stdout=subprocess.PIPE)
    send.stdout.close()
    recv = subprocess.run(["zfs", "receive", "-s", f"{dst.name}/usb"], stdin=head.stdout, capture_output=True)
    head.wait()
    send.wait()
    assert recv.returncode != 0
    assert sh("zfs", "get", "-H", "-o", "value", "receive_resume_token", f"{dst.name}/usb").stdout.strip() not in ("", "-")
    r2 = rebal_json("replicate", "usb", config=cfg)
    assert r2["outcome"] == "ok" and r2["resumed"] == [f"{d}@manual"], r2
    kinds = [x["kind"] for x in r2["datasets"]]
    # the resumed receive brought the target to @manual, the source's state: nothing more to send
    assert kinds == ["resumed", "unchanged"] and r2["snapshot"] == "", r2["datasets"]
    assert r2["datasets"][0]["bytes"] < 48 << 20  # only the rest of the cut stream
    same(d, f"{dst.name}/usb")
    verified_ok(cfg, "usb", 1)


@pytest.mark.lane_long  # the suite runs the same hooks scenario on zfs-fuse (test_replicate_setups.py)
def test_hooks_on_openzfs(pools, backup_host, tmp_path):
    src, dst = pools
    hooks_scenario(src, dst, tmp_path, lambda **h: backup_host.config_block(
        name="hk", source=f"{src.name}/data", target=f"{dst.name}/copy", **h))


# -- four jobs from the timer, three rounds ------------------------------------------------------

ETC = Path("/etc/rebal")
STATE = "/var/lib/rebal/lane-setups.db"
UNITS = ("rebal.service", "rebal-due.service", "rebal-due.timer")
DISKS = ("/dev/vdf", "/dev/vdg", "/dev/vdh")


@pytest.fixture
def server(backup_host, zfs_ready, request):
    """Three pools on the guest's disks (a file server, a backup host's pool over ssh, a local
    "external disk"), four jobs due every second in /etc/rebal/config.toml, the shipped units."""
    if not Path("/run/systemd/system").is_dir():
        pytest.fail("the guest does not run systemd as PID 1")
    pid = os.getpid()
    src, dst, usb = f"lanefs{pid}", f"lanebk{pid}", f"laneusb{pid}"
    saved = (ETC / "config.toml").read_bytes() if (ETC / "config.toml").exists() else None

    def cleanup():
        for u in UNITS:
            Path(f"/etc/systemd/system/{u}").unlink(missing_ok=True)
        sh("systemctl", "daemon-reload")
        sh("systemctl", "reset-failed", check=False)
        restore_etc(ETC, saved, STATE)
        for p in (src, dst, usb):
            sh("zpool", "destroy", "-f", p, check=False)
        for disk in DISKS:
            sh("zpool", "labelclear", "-f", disk, check=False)

    request.addfinalizer(cleanup)
    for pool, disk in zip((src, dst, usb), DISKS):
        sh("zpool", "create", "-f", "-m", f"/srv/{pool}", pool, disk)
    for ds in ("data", "data/a", "data/scratch", "data/scratch/keep", "home", "home/ann", "home/bob",
               "vm", "vm/one", "vm/tmp"):
        sh("zfs", "create", f"{src}/{ds}")
    sh("zfs", "set", "rebal:backup=prop", f"{src}/vm")
    sh("zfs", "set", "rebal:backup=false", f"{src}/vm/tmp")
    ETC.mkdir(exist_ok=True)
    shutil.copy(backup_host.identity, ETC / "lane-id")
    shutil.copy(backup_host.known_hosts, ETC / "lane-known_hosts")
    (ETC / "lane-id").chmod(0o600)

    def remote(**job):
        b = backup_host.config_block(schedule="* * * * * *", **job)
        return b.replace(str(backup_host.identity), str(ETC / "lane-id")).replace(
            str(backup_host.known_hosts), str(ETC / "lane-known_hosts"))

    jobs = [
        remote(name="ex", source=f"{src}/data", target=f"{dst}/ex", recursive=True, exclude=["*/scratch"],
               include=[f"{src}/data/scratch/keep"]),
        remote(name="prop", source=src, target=f"{dst}/prop", recursive=True, by_property=True),
        remote(name="offsite", source=f"{src}/home", target=f"{dst}/off", recursive=True),
        local_block(name="usb", source=f"{src}/home", target=f"{usb}/home", recursive=True, schedule="* * * * * *"),
    ]
    (ETC / "config.toml").write_text(f'state_db = "{STATE}"\n[schedule]\nfill = "0 0 1 1 *"\nhealth = "0 0 1 1 *"\n'
                                     + "\n".join(jobs))
    for u in UNITS:
        shutil.copy(Path(__file__).resolve().parents[2] / "systemd" / u, f"/etc/systemd/system/{u}")
    sh("systemctl", "daemon-reload")
    return src, dst, usb


def last_ok(job: str) -> dict | None:
    runs = rebal_json("runs", "--job", job, "--limit", "5", config=ETC / "config.toml")["runs"]
    return next((r for r in runs if r["outcome"] == "ok"), None)


@pytest.mark.lane_long  # about 6 minutes under TCG: the full lane runs it, CI's quick lane does not
@pytest.mark.lane_alone  # /etc/rebal, the shipped units, the lane's disks vdf-vdh
def test_four_jobs_from_the_timer_three_rounds(server):
    src, dst, usb = server
    cfg = ETC / "config.toml"
    jobs = {"ex": 3, "prop": 2, "offsite": 3, "usb": 3}  # datasets each one chooses
    for rnd in range(3):
        for ds in ("data", "data/a", "data/scratch", "data/scratch/keep", "home", "home/ann", "home/bob", "vm", "vm/one",
                   "vm/tmp"):
            write_random(f"/srv/{src}/{ds}/r{rnd}.bin", 2, seed=rnd * 100 + len(ds))
        before = {j: last_ok(j) for j in jobs}
        t0 = time.monotonic()
        r = sh("systemctl", "start", "rebal-due.service", check=False)
        took = time.monotonic() - t0
        assert r.returncode == 0, sh("journalctl", "-u", "rebal-due.service", "-n", "40", "--no-pager").stdout
        for j, n in jobs.items():
            now = last_ok(j)
            assert now is not None and (before[j] is None or now["id"] > before[j]["id"]), (j, now)
            kinds = {x["kind"] for x in now["details"]["datasets"]}
            if before[j] is None:
                assert kinds == {"full"}, (j, now["details"]["datasets"])
            else:  # the base the job needed is still there on both sides: nothing of it was pruned
                assert kinds == {"incremental"}, (j, now["details"]["datasets"])
                assert {x["base"] for x in now["details"]["datasets"]} == {before[j]["details"]["snapshot"]}, j
            assert len(now["details"]["datasets"]) == n, (j, now["details"]["datasets"])
            verified_ok(cfg, j, n)
        print(f"round {rnd + 1}: rebal-due.service ran the four jobs in {took:.1f} s")
    # one source, two jobs: each keeps its own cursor bookmark on every dataset, no snapshot of either
    for ds in (f"{src}/home", f"{src}/home/ann", f"{src}/home/bob"):
        marks = bookmarks(ds)
        assert len([b for b in marks if b.startswith("rebal-offsite-")]) == 1, (ds, marks)
        assert len([b for b in marks if b.startswith("rebal-usb-")]) == 1, (ds, marks)
        assert not [s for s in snaps(ds) if s.startswith("rebal-")], ds
    assert sh("zfs", "list", f"{dst}/prop/vm/tmp", check=False).returncode != 0  # rebal:backup=false
    assert sh("zfs", "list", f"{dst}/ex/scratch/keep").returncode == 0
    assert sh("zfs", "list", f"{dst}/ex/scratch", "-H", "-o", "name").returncode == 0  # its empty parent
    h = json.loads(rebal("health", "--json", config=cfg, check=False).stdout)
    assert not [f for f in h["findings"] if f["subject"].startswith("job:") and f["level"] != "OK"
                and "verified" not in f["message"]], h["findings"]


def test_the_wire_through_a_gated_key(pools, gated, tmp_path):
    """zstd at a level, mbuffer of a size given with a fraction, a chosen cipher: through a gated key,
    which checks every filter on the command line it is given."""
    src, dst = pools
    gate_key(gated, f"--receive-into {dst.name}/gate", tmp_path / "gate.log")
    sh("zfs", "create", f"{dst.name}/gate")
    d = f"{src.name}/data"
    sh("zfs", "create", d)
    write_random(os.path.join(sh("zfs", "get", "-H", "-o", "value", "mountpoint", d).stdout.strip(), "f"), 4)
    cfg = write_cfg(tmp_path, [gated.config_block(
        name="w", source=d, target=f"{dst.name}/gate/w", stream_compress="zstd", stream_compress_level=5,
        mbuffer=True, mbuffer_size="1.5M", ssh_options=["Ciphers=aes128-ctr", "ClearAllForwardings=yes"])])
    r = rebal_json("replicate", "w", config=cfg)
    assert r["outcome"] == "ok" and r["datasets"][0]["kind"] == "full", r
    assert not [n for n in r["notes"] if "not installed" in n], r["notes"]
    log = (tmp_path / "gate.log").read_text()
    assert "mbuffer -q -m 1536k" in log and "zstd -dc" in log, log[-2000:]
    same(d, f"{dst.name}/gate/w")


@pytest.mark.lane_long  # CI's quick lane leaves it to the full lane (CI's time: the quick set is about 16 min here)
def test_two_jobs_on_one_source_one_failing_for_a_week_with_bookmarks(pools, backup_host, tmp_path):
    """On OpenZFS each job's cursor is a bookmark: the off-site job prunes its snapshots daily for a
    week while the local one fails, and the local one's bookmark still carries it on incrementally."""
    from setupscenarios import two_jobs_one_failing_scenario

    out = two_jobs_one_failing_scenario(*pools, backup_host, tmp_path)
    assert out["cursor"] == "bookmark", out
