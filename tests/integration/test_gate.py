"""Backups a compromised file server cannot destroy (issue 13), on real zfs-fuse pools through a real
sshd on loopback whose key is gated by `rebal gate` in authorized_keys, as the README says."""

import json
import os
import shlex
import stat
import subprocess
import sys

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from replscenarios import backup_root, fill, mountpoint, snaps
from sshenv import gate_key, ssh_as_job
from zfsenv import sh

# the lane runs them on OpenZFS (bookmarks, receive -u, -x); CI runs them on zfs-fuse, and its quick
# lane leaves them to the full lane (9 minutes in the guest)
pytestmark = [pytest.mark.zfs, pytest.mark.lane, pytest.mark.lane_long]

ZERO = {"last": 1, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0}


@pytest.fixture
def gated(own_sshd):
    return own_sshd


@pytest.fixture
def pools(make_pool):
    src = make_pool([[]], size="256M")
    dst = make_pool([[]], size="256M")
    sh("zfs", "create", f"{src.name}/data")
    for ds in ("data/child", "data/child/grandchild", "data/sibling"):
        sh("zfs", "create", f"{src.name}/{ds}")
    return src, dst


def same(src_ds: str, dst_ds: str) -> None:
    """Each dataset's own files (the directories where children mount are left out: their times are
    those of whichever file system is mounted there at the moment)."""
    for rel, kids in (("", ("child", "sibling")), ("/child", ("grandchild",)), ("/sibling", ())):
        assert manifest(mountpoint(src_ds + rel), exclude=kids) == manifest(backup_root(dst_ds + rel), exclude=kids), rel


def everything(pool: str) -> list[str]:
    """Every dataset and snapshot of a pool: what a destroy would change."""
    return sorted(sh("zfs", "list", "-H", "-o", "name", "-t", "all", "-r", pool).stdout.split())


def test_push_through_the_gate_then_prune_on_the_backup_host(pools, gated, tmp_path):
    src, dst = pools
    log = tmp_path / "gate.log"
    sh("zfs", "create", f"{dst.name}/copy")  # the admin gives the gate an empty root to receive under
    gate_key(gated, f"--receive-into {dst.name}/copy", log)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + gated.config_block(
        name="guarded", source=f"{src.name}/data", target=f"{dst.name}/copy/data", recursive=True,
        retention_target=ZERO))
    fill(src, 1)
    r1 = rebal_json("replicate", "guarded", config=cfg)
    assert r1["outcome"] == "ok", r1
    assert {d["kind"] for d in r1["datasets"]} == {"full"} and len(r1["datasets"]) == 4
    assert any("gated" in n and "rebal prune" in n for n in r1["notes"]), r1["notes"]
    fill(src, 2)
    r2 = rebal_json("replicate", "guarded", config=cfg)
    assert r2["outcome"] == "ok" and {d["kind"] for d in r2["datasets"]} == {"incremental"}, r2
    # the push did not prune the backup (the gate refuses destroy): both snapshots are still there
    assert r2["pruned_target"] == []
    assert snaps(f"{dst.name}/copy/data") == sorted([r1["snapshot"], r2["snapshot"]])
    same(f"{src.name}/data", f"{dst.name}/copy/data")
    text = log.read_text()
    assert "allowed from" in text and "zfs receive" in text and "refused" not in text
    # retention on the backup host itself
    pr = rebal_json("prune", f"{dst.name}/copy/data", "--job", "guarded", "-r", "--last", "1", "--hourly", "0",
                    "--daily", "0", "--weekly", "0", "--monthly", "0", "--dry-run", config=cfg)
    assert pr["dry_run"] and len(pr["destroyed"]) == 4, pr
    assert snaps(f"{dst.name}/copy/data") == sorted([r1["snapshot"], r2["snapshot"]])
    pr = rebal_json("prune", f"{dst.name}/copy/data", "--job", "guarded", "-r", config=cfg)  # the job's own policy
    assert sorted(pr["destroyed"]) == sorted(f"{dst.name}/copy/data{rel}@{r1['snapshot']}"
                                             for rel in ("", "/child", "/child/grandchild", "/sibling")), pr
    assert snaps(f"{dst.name}/copy/data") == [r2["snapshot"]]
    fill(src, 3)
    r3 = rebal_json("replicate", "guarded", config=cfg)
    assert r3["outcome"] == "ok" and {d["kind"] for d in r3["datasets"]} == {"incremental"}, r3
    # --force-rollback is refused up front: this gate was not started with --allow-rollback
    r = rebal("replicate", "guarded", "--force-rollback", f"{dst.name}/copy/data", "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert out["outcome"] == "failed" and "--allow-rollback" in out["error"], out
    # verify through the gate (issue 69): the gate hashes the backup's files there (rebal-gate-verify),
    # every file compared by count, size and sha256; OK, and health says the backup was verified
    v = rebal("verify", "guarded", "--sample", "all", "--json", config=cfg, check=False)
    rep = json.loads(v.stdout)
    assert v.returncode == 0 and rep["level"] == "OK" and not rep["findings"], (v.stderr, rep)
    assert rep["files"][0] == rep["files"][1] > 100 and len(rep["sample"]) == rep["files"][0], rep["files"]
    assert any("rebal-gate-verify" in n for n in rep["notes"]), rep["notes"]
    health = json.loads(rebal("health", "--json", config=cfg, check=False).stdout)
    assert not [f for f in health["findings"] if "verif" in f["message"]], health["findings"]
    assert "rebal-gate-verify" in log.read_text()


HOSTILE = [
    "zfs destroy -r {root}",
    "zfs destroy {root}/data@{snap}",
    "zfs rollback -r {root}/data@{snap}",
    "zfs receive -F {root}/data",
    "zfs receive {other}/stolen",
    "zfs rename {root}/data {root}/gone",
    "zfs set readonly=off {root}/data",
    "zfs inherit -r mountpoint {root}",
    "sh -c 'zfs destroy -r {root}'",
    "zfs list {root}; zfs destroy -r {root}",
    "zfs list $(zfs destroy -r {root})",
    "zfs list `zfs destroy -r {root}`",
    "zfs list {root} && zfs destroy -r {root}",
    "zfs list {root} | sh",
    "rsync --server --sender -logDtpre.iLsfxCIvu . /",
    "zpool destroy {pool}",
    "",
]


def test_the_gate_refuses_everything_else_and_the_backup_is_untouched(pools, gated, tmp_path):
    src, dst = pools
    log = tmp_path / "gate.log"
    sh("zfs", "create", f"{dst.name}/copy")
    gate_key(gated, f"--receive-into {dst.name}/copy", log)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + gated.config_block(
        name="g", source=f"{src.name}/data", target=f"{dst.name}/copy/data"))
    fill(src, 1)
    r1 = rebal_json("replicate", "g", config=cfg)
    assert r1["outcome"] == "ok", r1
    before = everything(dst.name)
    sh("zfs", "snapshot", f"{src.name}/data@hostile")  # where the source keeps no snapshot (bookmarks)
    stream = subprocess.run(["zfs", "send", f"{src.name}/data@hostile"], capture_output=True, check=True).stdout
    for tpl in HOSTILE:
        line = tpl.format(root=f"{dst.name}/copy", snap=r1["snapshot"], other=dst.name, pool=dst.name)
        r = ssh_as_job(gated, line, input=stream if "receive" in line else b"")
        assert r.returncode == 2, (line, r.returncode, r.stdout, r.stderr)
        assert b"rebal gate: refused" in r.stderr, (line, r.stderr)
        assert everything(dst.name) == before, f"{line!r} changed the backup host"
    text = log.read_text()
    assert text.count("refused from") == len(HOSTILE), text
    # and the job still works through the same key
    fill(src, 2)
    r2 = rebal_json("replicate", "g", config=cfg)
    assert r2["outcome"] == "ok" and r2["datasets"][0]["kind"] == "incremental", r2


def test_rsync_push_through_the_gate(pools, gated, tmp_path):
    src, dst = pools
    log = tmp_path / "gate.log"
    sh("zfs", "create", f"{dst.name}/files")
    gate_key(gated, f"--receive-into {dst.name}/files", log)
    target = mountpoint(f"{dst.name}/files") + "/tree with space"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + gated.config_block(
        name="rs", mode="rsync", source=f"{src.name}/data", target=target, snapshot_target=True,
        retention_target=ZERO))
    fill(src, 1)
    for _ in range(2):
        r = rebal_json("replicate", "rs", config=cfg)
        assert r["outcome"] == "ok", r
        assert any("gated" in n for n in r["notes"]), r["notes"]
    kids = ("child", "sibling")
    # through a gate no device node, fifo or socket is made on the backup host, and where its mount
    # honours setuid (zfs-fuse's always) no setuid/setgid bit is set: everything else as sent
    nosuid = bool(os.statvfs(target).f_flag & os.ST_NOSUID)
    special = (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK)
    want = {k: (v if nosuid or not isinstance(v, dict) else v | {"mode": v["mode"] & ~0o6000})
            for k, v in manifest(mountpoint(f"{src.name}/data"), exclude=kids).items()
            if not (isinstance(v, dict) and v["type"] in special)}
    assert want == manifest(target, exclude=kids)
    assert any("device nodes" in n for n in r["notes"]), r["notes"]
    assert len([s for s in snaps(f"{dst.name}/files") if s.startswith("rebal-rs-")]) == 2  # not pruned from here
    # reading the backup (rsync --sender), or writing outside the dataset, is refused
    for line in ("rsync --server --sender -logDtpre.iLsfxCIvu . " + shlex.quote(target),
                 "rsync --server -logDtpre.iLsfxCIvu . /etc/",
                 "rsync --server -logDtpre.iLsfxCIvu . " + shlex.quote(target + "/../../.."),
                 "rsync --server -slogDtpre.iLsfxCIvu ."):
        r = ssh_as_job(gated, line)
        assert r.returncode == 2 and b"refused" in r.stderr, (line, r.stderr)


def test_pull_job_through_a_gated_file_server(pools, gated, tmp_path):
    """The backup host runs the job and connects to the file server, whose key may only send."""
    src, dst = pools
    log = tmp_path / "gate.log"
    gate_key(gated, f"--send-from {src.name}/data", log)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "pulled"\ndirection = "pull"\n'
        f'source_host = "{gated.host}"\nsource_port = {gated.port}\nidentity_file = "{gated.identity}"\n'
        f'known_hosts = "{gated.known_hosts}"\nsource = "{src.name}/data"\ntarget = "{dst.name}/pulled"\n'
        f"recursive = true\n[replicate.retention_target]\nlast = 1\nhourly = 0\ndaily = 0\nweekly = 0\nmonthly = 0\n")
    fill(src, 1)
    r1 = rebal_json("replicate", "pulled", config=cfg)
    assert r1["outcome"] == "ok", r1
    assert {d["kind"] for d in r1["datasets"]} == {"full"} and len(r1["datasets"]) == 4
    fill(src, 2)
    r2 = rebal_json("replicate", "pulled", config=cfg)
    assert r2["outcome"] == "ok" and {d["kind"] for d in r2["datasets"]} == {"incremental"}, r2
    same(f"{src.name}/data", f"{dst.name}/pulled")
    # retention ran on both ends: the backup (here) keeps the newest, the source keeps its held base only
    assert r2["pruned_target"] == [r1["snapshot"]], r2
    assert snaps(f"{dst.name}/pulled") == [r2["snapshot"]]
    # where the ZFS has bookmarks the cursor is one and no snapshot stays; else the held base stays
    bookmarked = r2["datasets"][0]["cursor"] == "bookmark"
    assert snaps(f"{src.name}/data") == ([] if bookmarked else [r2["snapshot"]]), r2
    assert "allowed from" in log.read_text() and "zfs send" in log.read_text()
    runs = rebal_json("runs", "--job", "pulled", config=cfg)["runs"]
    assert [r["outcome"] for r in runs] == ["ok", "ok"] and runs[0]["pool"] == dst.name
    # what a compromised backup host could try on the file server: refused, nothing changed
    before = everything(src.name)
    for line in (f"zfs destroy -r {src.name}/data", f"zfs destroy {src.name}/data@{r2['snapshot']}x",
                 f"zfs receive -F {src.name}/data", f"zfs rollback {src.name}/data@{r2['snapshot']}",
                 f"zfs send {src.name}@{r2['snapshot']}", f"zfs set mountpoint=/etc {src.name}/data",
                 "sh -c id", f"zfs send {src.name}/data@{r2['snapshot']} > /etc/passwd"):
        r = ssh_as_job(gated, line)
        assert r.returncode == 2 and b"refused" in r.stderr, (line, r.stderr)
    assert everything(src.name) == before


def test_gate_command_errors_are_clear(tmp_path):
    r = subprocess.run([sys.executable, "-m", "rebal", "gate"], capture_output=True, text=True)
    assert r.returncode == 2 and "exactly one of --receive-into" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "rebal", "gate", "--send-from", "tank/-x"], capture_output=True, text=True)
    assert r.returncode == 2 and "bad dataset name" in r.stderr and "Traceback" not in r.stderr
    # an interactive login (no command) is refused
    r = subprocess.run([sys.executable, "-m", "rebal", "gate", "--receive-into", "bk/x", "--log", str(tmp_path / "l")],
                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    assert r.returncode == 2 and "interactive login is refused" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "rebal", "gate", "--receive-into", "bk/x", "--check", "--command",
                        "zfs receive -s -u bk/x/y"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("allowed: zfs receive -s -u bk/x/y"), r.stdout


def test_a_key_gated_after_its_first_runs_is_seen_by_the_next_run_and_its_dry_run(pools, gated, tmp_path):
    """Issue 69 (4): the other end's usage text is kept a day; a key gated after it was kept made
    every real run try to prune through the gate ("could not prune ... zfs destroy is not allowed
    through this key") while the dry run, which asks afresh, said retention is done on the backup
    host. The first refusal forgets the kept text and says so once; the next run knows the gate."""
    src, dst = pools
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + gated.config_block(
        name="later", source=f"{src.name}/data", target=f"{dst.name}/copy/data", retention_target=ZERO))
    sh("zfs", "create", f"{dst.name}/copy")
    fill(src, 1)
    assert rebal_json("replicate", "later", config=cfg)["outcome"] == "ok"  # a plain key: the usage text kept
    gate_key(gated, f"--receive-into {dst.name}/copy", tmp_path / "gate.log")
    fill(src, 2)
    r2 = rebal_json("replicate", "later", config=cfg)
    assert r2["outcome"] == "ok", r2
    assert not [n for n in r2["notes"] if n.startswith("could not prune")], r2["notes"]
    assert any("gated now" in n for n in r2["notes"]), r2["notes"]
    dry = json.loads(rebal("replicate", "later", "--dry-run", "--json", config=cfg).stdout)
    fill(src, 3)
    r3 = rebal_json("replicate", "later", config=cfg)
    said = [n for n in r3["notes"] if "rebal prune" in n]
    assert said and said == [n for n in dry["notes"] if "rebal prune" in n], (said, dry["notes"])
    assert not [n for n in r3["notes"] if "could not prune" in n or "gated now" in n], r3["notes"]
