"""Replication over a real sshd on loopback into a second zfs-fuse pool (the backup host)."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from replscenarios import cfg_for, fill, mountpoint, snaps, tree_scenario
from zfsenv import sh

pytestmark = pytest.mark.zfs








@pytest.fixture
def pools(make_pool):
    src = make_pool([[], []], size="256M")
    dst = make_pool([[]], size="512M")
    sh("zfs", "create", f"{src.name}/data")
    sh("zfs", "create", f"{src.name}/data/child")
    sh("zfs", "create", f"{src.name}/data/child/grandchild")
    sh("zfs", "create", f"{src.name}/data/sibling")
    return src, dst




def same_trees(src, dst):
    for rel in ("", "/child", "/child/grandchild", "/sibling"):
        a = manifest(mountpoint(f"{src.name}/data{rel}"))
        b = manifest(mountpoint(f"{dst.name}/copy{rel}"))
        # the mount points of child datasets are directories of the parent on both sides
        assert a == b, rel


def test_full_then_incremental_recursive(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="nightly", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True)
    fill(src, 1)
    r1 = rebal_json("replicate", "nightly", config=cfg)
    assert r1["outcome"] == "ok", r1
    kinds = {d["source"]: d["kind"] for d in r1["datasets"]}
    assert set(kinds.values()) == {"full"} and len(kinds) == 4
    # parents are received before children
    order = [d["source"] for d in r1["datasets"]]
    assert order.index(f"{src.name}/data") < order.index(f"{src.name}/data/child") < order.index(
        f"{src.name}/data/child/grandchild")
    same_trees(src, dst)
    with open(os.path.join(mountpoint(f"{src.name}/data/child"), "changed"), "wb") as f:
        f.write(os.urandom(100_000))
    r2 = rebal_json("replicate", "nightly", config=cfg)
    assert r2["outcome"] == "ok", r2
    assert {d["kind"] for d in r2["datasets"]} == {"incremental"}
    assert all(d["base"] == r1["snapshot"] for d in r2["datasets"])
    assert r2["bytes"] < r1["bytes"]
    # every second of the replicator's run is in a phase, "other" holding what none names (issue 67)
    ph = r2["phases"]
    assert {"listing", "unchanged", "snapshot", "listing the source again", "sends", "prune", "other"} <= set(ph), ph
    assert sum(ph.values()) <= r2["seconds"] + 0.01, (ph, r2["seconds"])
    same_trees(src, dst)
    runs = rebal_json("runs", "--job", "nightly", config=cfg)["runs"]
    assert [r["outcome"] for r in runs] == ["ok", "ok"]
    assert runs[0]["details"]["bytes"] == r2["bytes"] > 0
    status = rebal_json("status", src.name, config=cfg)
    [rep] = status["replication"]
    assert rep["job"] == "nightly" and rep["snapshot"] == r2["snapshot"] and rep["age_seconds"] < 120
    # without a terminal (a log) each dataset sent gets a line as it is done, not only the end's summary;
    # r2 sent with -i (nothing between its base and its snapshot), r3 with -I: an admin's snapshot
    # taken between the runs reaches the backup too
    sh("zfs", "snapshot", f"{src.name}/data/child/grandchild@between")
    with open(os.path.join(mountpoint(f"{src.name}/data/child/grandchild"), "again"), "wb") as f:
        f.write(os.urandom(50_000))
    r3 = rebal("replicate", "nightly", config=cfg)
    lines = [ln for ln in r3.stderr.splitlines() if ln.startswith("replicate nightly: ")]
    assert any(ln.startswith(f"replicate nightly: {src.name}/data/child/grandchild: incremental, ")
               and ln.endswith(" s") for ln in lines), r3.stderr
    assert "between" in snaps(f"{dst.name}/copy/child/grandchild")
    assert "between" not in snaps(f"{dst.name}/copy/child")


def test_diverged_target_fails_cleanly(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    fill(src, 1)
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    sh("zfs", "set", "readonly=off", f"{dst.name}/copy")
    sh("zfs", "snapshot", f"{dst.name}/copy@made-on-the-backup")
    before = snaps(f"{dst.name}/copy")
    fill(src, 2)
    r = rebal("replicate", "j", "--json", config=cfg, check=False)
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["outcome"] == "failed" and "@made-on-the-backup" in out["error"] and "diverged" in out["error"]
    assert r.stderr.startswith("rebal: error: replicate j failed: ") and "diverged" in r.stderr, r.stderr
    assert snaps(f"{dst.name}/copy") == before, "nothing on the target may be destroyed"
    runs = rebal_json("runs", "--job", "j", config=cfg)["runs"]
    assert runs[0]["outcome"] == "failed" and "diverged" in runs[0]["error"]


def test_target_written_to_fails_then_force_rollback(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    fill(src, 1)
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    sh("zfs", "set", "readonly=off", f"{dst.name}/copy")
    with open(os.path.join(mountpoint(f"{dst.name}/copy"), "written-on-backup"), "w") as f:
        f.write("x")
    fill(src, 2)
    r = rebal("replicate", "j", "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert out["outcome"] == "failed" and "written to since its last snapshot" in out["error"]
    assert os.path.exists(os.path.join(mountpoint(f"{dst.name}/copy"), "written-on-backup"))
    # --force-rollback needs the dataset named, and says what it destroyed
    r = rebal("replicate", "j", "--force-rollback", f"{src.name}/elsewhere", "--json", config=cfg, check=False)
    assert r.returncode == 2 and "not a dataset of job j" in r.stderr, r.stderr
    r = rebal("replicate", "j", "--force-rollback", f"{dst.name}/copy", "--json", config=cfg)
    out = json.loads(r.stdout)
    assert out["outcome"] in ("ok", "warning") and not [d for d in out["datasets"] if d["kind"] == "failed"], out
    assert any(f"--force-rollback {dst.name}/copy: rolled back" in w and "written there" in w for w in out["warnings"]), out
    kids = ("child", "sibling")  # other datasets (this job is not recursive)
    assert manifest(mountpoint(f"{src.name}/data"), exclude=kids) == manifest(mountpoint(f"{dst.name}/copy"), exclude=kids)


def test_unknown_host_key_is_refused(pools, backup_host, tmp_path):
    src, dst = pools
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    cfg.write_text(cfg.read_text().replace(str(backup_host.known_hosts), str(empty)))
    r = rebal("replicate", "j", "--json", config=cfg, check=False)
    out = json.loads(r.stdout)
    assert r.returncode == 6 and out["outcome"] == "failed"  # README: 6, the host's key is unknown
    assert "host key is unknown or has changed" in out["error"] and "never accepts" in out["error"]
    assert empty.read_text() == "", "the key must not be added"


def test_an_unreachable_host_exits_6_and_says_why_on_stderr(pools, backup_host, tmp_path):
    """README's exit code 6 for a backup host that cannot be reached, as the job's --dry-run gives;
    the failure goes to stderr, not stdout (issue 36: a real run exited 1 and said it on stdout)."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy")
    cfg.write_text(cfg.read_text().replace(f"target_port = {backup_host.port}", "target_port = 1"))
    for argv in (["replicate", "j"], ["replicate", "j", "--dry-run"]):
        r = rebal(*argv, config=cfg, check=False)
        assert r.returncode == 6, (argv, r.returncode, r.stderr)
        assert r.stdout == "" and "rebal: error:" in r.stderr and "cannot reach the backup host" in r.stderr, (argv, r)
    [run] = rebal_json("runs", "--job", "j", config=cfg)["runs"]
    assert run["outcome"] == "failed" and "cannot reach" in run["error"]
    assert sh("zfs", "list", f"{dst.name}/copy", check=False).returncode != 0


def test_retention_prunes_only_this_jobs_snapshots(pools, backup_host, tmp_path):
    from rebal import config
    from rebal.replicate.job import endpoint, replicator
    from rebal.transport import Ssh

    src, dst = pools
    cfg_path = cfg_for(tmp_path, backup_host, name="keep", source=f"{src.name}/data", target=f"{dst.name}/copy",
                       retention_source={"hourly": 1, "daily": 2, "weekly": 0, "monthly": 0},
                       retention_target={"hourly": 1, "daily": 3, "weekly": 0, "monthly": 0})
    cfg = config.load(str(cfg_path))
    job = cfg.job("keep")
    sh("zfs", "snapshot", f"{src.name}/data@manual")
    sh("zfs", "snapshot", f"{src.name}/data@rebal-otherjob-20261101T000000Z")
    t0 = datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
    times = [t0 + timedelta(days=d, hours=h) for d in range(4) for h in (0, 5)]
    for i, t in enumerate(times):
        fill(src, 10 + i)
        with Ssh(endpoint(job)) as ssh:
            rep = replicator(job, ssh, clock=lambda t=t: t).run()
        assert not rep.failed, rep
    ours_src = [s for s in snaps(f"{src.name}/data") if s.startswith("rebal-keep-")]
    ours_dst = [s for s in snaps(f"{dst.name}/copy") if s.startswith("rebal-keep-")]
    newest = "rebal-keep-20261104T150000Z"
    # source: newest (hourly 1) + the newest of the last 2 days; target: newest of the last 3 days
    assert ours_src == ["rebal-keep-20261103T150000Z", newest]
    assert ours_dst == ["rebal-keep-20261102T150000Z", "rebal-keep-20261103T150000Z", newest]
    assert "manual" in snaps(f"{src.name}/data") and "rebal-otherjob-20261101T000000Z" in snaps(f"{src.name}/data")


def progress_of_running(cfg) -> int:
    """Bytes the running run has moved so far, as rebal records them (rebal runs)."""
    runs = rebal_json("runs", "--limit", "1", config=cfg)["runs"]
    return (runs[0]["progress"] or 0) if runs and runs[0]["outcome"] == "running" else 0


def test_killed_transfer_then_next_run_completes(pools, backup_host, tmp_path):
    """The ssh carrying the stream is killed halfway; zfs-fuse cannot resume a receive, so the next
    run starts again from the last common snapshot."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="cut", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  bwlimit="8M")
    fill(src, 1)
    assert rebal_json("replicate", "cut", config=cfg)["outcome"] == "ok"
    big = os.path.join(mountpoint(f"{src.name}/data"), "big.bin")
    with open(big, "wb") as f:
        f.write(os.urandom(40 * 2**20))
    proc = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "replicate", "cut", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until the stream's ssh runs, then kill it (as a network or reboot would)
    deadline = time.monotonic() + 30
    killed = False
    while time.monotonic() < deadline and not killed:
        ps = subprocess.run(["pgrep", "-f", f"zfs receive {dst.name}/copy"], capture_output=True, text=True)
        for pid in ps.stdout.split():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0] == b"ssh" and progress_of_running(cfg) >= 4 * 2**20:
                os.kill(int(pid), signal.SIGKILL)  # a part of the 40 MiB has gone through: cut it
                killed = True
                break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert killed, "the transfer's ssh was never seen"
    first = json.loads(out)
    assert proc.returncode == 1 and first["outcome"] == "failed", first
    assert first["bytes"] > 0
    second = rebal_json("replicate", "cut", config=cfg)
    assert second["outcome"] == "ok", (second.get("error"), second)
    assert second["datasets"][0]["base"] != first["snapshot"]
    kids = ("child", "sibling")
    assert manifest(mountpoint(f"{src.name}/data"), exclude=kids) == manifest(mountpoint(f"{dst.name}/copy"), exclude=kids)
    runs = rebal_json("runs", "--job", "cut", config=cfg)["runs"]
    assert [r["outcome"] for r in runs] == ["ok", "failed", "ok"]


def test_dry_run_changes_nothing(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="j", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True)
    before = snaps(f"{src.name}/data")
    out = rebal("replicate", "j", "--dry-run", config=cfg).stdout
    assert "would run: zfs snapshot -r" in out and "zfs receive" in out
    assert snaps(f"{src.name}/data") == before
    assert sh("zfs", "list", f"{dst.name}/copy", check=False).returncode != 0


def test_unknown_job(tmp_path, backup_host):
    cfg = cfg_for(tmp_path, backup_host, name="j", source="tank/data", target="backup/x")
    r = rebal("replicate", "nope", config=cfg, check=False)
    assert r.returncode == 2 and "no replication job named 'nope' (jobs: j)" in r.stderr


def tree_bytes(path) -> int:
    total = 0
    for d, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


def test_rsync_full_then_again(pools, backup_host, tmp_path):
    src, dst = pools
    target = os.path.join(mountpoint(dst.name), "files")
    cfg = cfg_for(tmp_path, backup_host, name="files", mode="rsync", source=f"{src.name}/data", target=target,
                  recursive=True)
    fill(src, 1)
    r1 = rebal_json("replicate", "files", config=cfg)
    assert r1["outcome"] == "ok", r1
    src_root = mountpoint(f"{src.name}/data")
    assert manifest(src_root) == manifest(target)
    fill(src, 2)
    os.unlink(os.path.join(src_root, "sibling", "f1"))  # deletions reach the backup too
    r2 = rebal_json("replicate", "files", config=cfg)
    assert r2["outcome"] == "ok"
    assert manifest(src_root) == manifest(target)
    assert r2["bytes_expected"] < tree_bytes(src_root)  # only what changed went
    # the snapshot views (clones on zfs-fuse) are gone
    assert not [n for n in sh("zfs", "list", "-H", "-o", "name", "-r", src.name).stdout.split() if "rebal-view" in n]


def rsync_of(pid: int, target: str) -> bool:
    """Whether rsync ``pid`` is this test's: its command line names the test's own target."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return target.encode() in f.read()
    except OSError:
        return False


def test_rsync_cut_halfway_continues_without_resending(pools, backup_host, tmp_path):
    src, dst = pools
    target = os.path.join(mountpoint(dst.name), "files")
    cfg = cfg_for(tmp_path, backup_host, name="files", mode="rsync", source=f"{src.name}/data", target=target,
                  bwlimit="4M")
    src_root = mountpoint(f"{src.name}/data")
    for i in range(8):
        with open(os.path.join(src_root, f"part{i}.bin"), "wb") as f:
            f.write(os.urandom(3 * 2**20))
    total = tree_bytes(src_root)
    proc = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "replicate", "files", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    killed = False
    while time.monotonic() < deadline and not killed:
        if tree_bytes(target) >= total // 3:  # a third is over: cut the transfer
            for pid in subprocess.run(["pgrep", "-x", "rsync"], capture_output=True, text=True).stdout.split():
                if not rsync_of(int(pid), target):
                    continue  # another test's (the suite runs three at once)
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed = True
                except ProcessLookupError:
                    pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert killed
    first = json.loads(out)
    assert first["outcome"] == "failed" and "rsync" in first["error"]
    second = rebal_json("replicate", "files", config=cfg)
    assert second["outcome"] == "ok", (second.get("error"), second)
    assert second["bytes_sent"] < total * 0.8, (second["bytes_sent"], total)
    # rsync makes its partial-dir before it writes the partial file there and removes it only with
    # that file: a cut between the two leaves it empty (rsync's own behaviour, kept out of restores);
    # what is left there must be empty, never a partial file
    for d, dirs, _files in os.walk(target):
        if os.path.basename(d) == ".rebal-partial":
            assert os.listdir(d) == [], f"a partial file was left behind in {d}"
            os.rmdir(d)
    assert manifest(src_root, exclude=("child", "sibling")) == manifest(target, exclude=("child", "sibling"))
    runs = rebal_json("runs", "--job", "files", config=cfg)["runs"]
    assert runs[0]["details"]["bytes_sent"] == second["bytes_sent"]


def test_rsync_snapshot_target(pools, backup_host, tmp_path):
    src, dst = pools
    sh("zfs", "create", f"{dst.name}/versions")
    target = mountpoint(f"{dst.name}/versions")
    cfg = cfg_for(tmp_path, backup_host, name="v", mode="rsync", source=f"{src.name}/data", target=target,
                  snapshot_target=True)
    fill(src, 1)
    r = rebal_json("replicate", "v", config=cfg)
    assert r["outcome"] == "ok" and r["target_snapshot"] == f"{dst.name}/versions@{r['snapshot']}"
    assert snaps(f"{dst.name}/versions") == [r["snapshot"]]


@pytest.fixture
def netns_backup_host(tmp_path):
    """A backup host on a network of its own: sshd in a network namespace behind a veth pair."""
    from sshenv import start_sshd

    n = os.getpid() % 200 + 20
    ns, veth, peer = f"rbtns{os.getpid()}", f"rbv{os.getpid() % 100000}a", f"rbv{os.getpid() % 100000}b"
    here, there = f"10.233.{n}.1", f"10.233.{n}.2"
    cmds = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", peer],
        ["ip", "link", "set", peer, "netns", ns],
        ["ip", "addr", "add", f"{here}/30", "dev", veth],
        ["ip", "link", "set", veth, "up"],
        ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{there}/30", "dev", peer],
        ["ip", "netns", "exec", ns, "ip", "link", "set", peer, "up"],
        ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for c in cmds:
            sh(*c)
        host = start_sshd(tmp_path / "nssshd", host=there, netns=ns)
    except Exception as e:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        pytest.fail(f"cannot build the test network: {e}")
    host.link = veth
    yield host
    host.stop()
    subprocess.run(["ip", "link", "del", veth], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_cut_network_fails_clearly_and_the_next_run_completes(pools, netns_backup_host, tmp_path):
    src, dst = pools
    host = netns_backup_host
    cfg = cfg_for(tmp_path, host, name="far", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  bwlimit="4M", keepalive=1)
    fill(src, 1)
    with open(os.path.join(mountpoint(f"{src.name}/data"), "big.bin"), "wb") as f:
        f.write(os.urandom(24 * 2**20))
    proc = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "replicate", "far", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and progress_of_running(cfg) < 2 * 2**20:
        time.sleep(0.05)
    sh("ip", "link", "set", host.link, "down")  # the cable is pulled
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        sh("ip", "link", "set", host.link, "up")
    assert out.strip(), f"rc={proc.returncode} stderr={err!r}"
    first = json.loads(out)
    assert proc.returncode == 1 and first["outcome"] == "failed", first
    assert "cannot reach the backup host" in first["error"] or "timeout" in first["error"].lower(), first["error"]
    runs = rebal_json("runs", "--job", "far", config=cfg)["runs"]
    assert runs[0]["outcome"] == "failed" and runs[0]["error"] == first["error"]
    # the snapshot being sent stays on the source: a receiver that kept a resume token names it
    assert first["snapshot"] in snaps(f"{src.name}/data"), (first["snapshot"], snaps(f"{src.name}/data"))
    # the backup side gives up the cut receive on its own (sshd's ClientAlive); then a run completes
    second = None
    for _ in range(20):
        second = json.loads(rebal("replicate", "far", "--json", config=cfg, check=False).stdout)
        err = second.get("error") or ""
        if second["outcome"] == "ok" or not ("busy" in err or "receive into it is still running" in err):
            break  # (a dead full receive shows as busy, or as the target it is creating, without a snapshot)
        time.sleep(0.5)  # bounded retry while the backup host still holds the dead receive
    assert second["outcome"] == "ok", (second.get("error"), second)
    kids = ("child", "sibling")
    assert manifest(mountpoint(f"{src.name}/data"), exclude=kids) == manifest(mountpoint(f"{dst.name}/copy"), exclude=kids)


def test_zstd_stream_and_parallel_children(pools, backup_host, tmp_path):
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="z", source=f"{src.name}/data", target=f"{dst.name}/copy",
                  recursive=True, stream_compress="zstd")
    fill(src, 3)
    r = rebal_json("replicate", "z", config=cfg)
    assert r["outcome"] == "ok" and not any("zstd" in n for n in r["notes"]), r
    same_trees(src, dst)


def test_tree_grows_shrinks_and_renames_between_runs(pools, backup_host, tmp_path):
    tree_scenario(*pools, backup_host, tmp_path)


def test_round_trips_of_a_run_with_nothing_new(pools, backup_host, tmp_path):
    """Issue 14: the backup's tree and tokens in one query, its zfs's abilities kept a day in the state
    database: a run with nothing new asks the backup host twice (tree, stream) and prunes once."""
    src, dst = pools
    cfg = cfg_for(tmp_path, backup_host, name="rt", source=f"{src.name}/data", target=f"{dst.name}/copy")
    fill(src, 1)
    first = rebal_json("replicate", "rt", config=cfg)
    assert first["outcome"] == "ok" and first["remote_commands"] >= 3, first  # the usage asked once
    again = rebal_json("replicate", "rt", config=cfg)
    assert again["outcome"] == "ok" and again["datasets"][0]["kind"] == "incremental", again
    assert again["remote_commands"] <= 3, again["remote_commands"]  # tree+tokens, stream, prune
    assert again["local_commands"] <= 10, again["local_commands"]
    runs = rebal_json("runs", "--job", "rt", config=cfg)["runs"]
    assert runs[0]["details"]["remote_commands"] == again["remote_commands"]



def test_pruning_many_snapshots_takes_few_commands(pools, backup_host, tmp_path):
    from replscenarios import bulk_prune_scenario

    src, dst = pools
    got = bulk_prune_scenario(src, dst, backup_host, tmp_path, comma_lists=False)
    print(got)


def test_rsync_never_writes_a_child_outside_its_target(pools, tmp_path):
    """A child mounted elsewhere (tank/data/www at /var/www) was synced to normpath(target + ../..):
    for a local target, over the live dataset itself from its own snapshot with --delete-delay; a
    child with mountpoint=none over the parent's copy; and a child mounted at proj[1] was excluded from
    the parent as the pattern proj[1] (proj1), so the parent's own directory proj1 never reached the
    backup. Such children are now left out, named, and the names match themselves."""
    src, dst = pools
    outside = tmp_path / "www"
    sh("zfs", "create", "-o", f"mountpoint={outside}", f"{src.name}/data/www")
    sh("zfs", "create", "-o", "mountpoint=none", f"{src.name}/data/hidden")
    root = mountpoint(f"{src.name}/data")
    sh("zfs", "create", "-o", f"mountpoint={root}/proj[1]", f"{src.name}/data/p1")  # a name zfs allows, a path with [
    os.mkdir(os.path.join(root, "proj1"))
    with open(os.path.join(root, "proj1", "keep"), "w") as f:
        f.write("the parent's own\n")
    with open(os.path.join(root, "proj[1]", "kid"), "w") as f:
        f.write("the child's\n")
    (outside / "index.html").write_text("live\n")
    target = os.path.join(mountpoint(dst.name), "files")
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "files"\nmode = "rsync"\n'
                   f'source = "{src.name}/data"\ntarget = "{target}"\nrecursive = true\n')
    r = rebal_json("replicate", "files", config=cfg)
    (outside / "later.html").write_text("written after the snapshot\n")
    r2 = rebal_json("replicate", "files", config=cfg)
    assert r["outcome"] == "ok" and r2["outcome"] == "ok", (r, r2)
    assert (outside / "later.html").exists() and (outside / "index.html").read_text() == "live\n"
    left = " ".join(r2["excluded"])
    assert f"{src.name}/data/www" in left and f"{src.name}/data/hidden" in left, r2["excluded"]
    assert open(os.path.join(target, "proj1", "keep")).read() == "the parent's own\n"
    assert open(os.path.join(target, "proj[1]", "kid")).read() == "the child's\n"
