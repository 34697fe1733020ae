"""Power cuts (issue 18): the whole guest is killed (qemu SIGKILL: the guest loses its page cache and
everything in flight, as a machine losing power) at random moments during a copy rebalance, a
`--hardlinks` rebalance and a replication; then it boots, the pool is imported, rebal recovers.
After each cut: the tree equals its manifest (content, modes, owners, ns times, xattrs, link groups),
no rebal temp or anchor name is left, the cut run is in `rebal runs` as interrupted, and a cut
replication resumes or restarts with the backup intact. Both ends of the replication are in the one
guest, so each of its cuts cuts the sending and the receiving side at once; the second test cuts the
receiving side alone (two guests: a file server and a backup host).
The rebalances are steered (issue 66: the old vdevs are kept at about 60% by another dataset): at
each cut the threshold the run set is in force; after the boot the module's default is back and the
first rebal command has nothing to put back.

Runs on the host in the lane (marker openzfs_vm): REBAL_POWERCUT_CUTS (default 10), seed
REBAL_POWERCUT_SEED."""

from __future__ import annotations

import json
import os
import random
import shlex
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "vm"))

pytestmark = pytest.mark.openzfs_vm

CFG = "/root/pc/config.toml"
CHECK = "/root/lane/src/tests/openzfs/guestcheck.py"
POOL = "pc"
DATA = "/pc/data"
PARAM = "/sys/module/zfs/parameters/zfs_mg_noalloc_threshold"  # what a steered rebalance sets (issue 66)


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    from guest import Guest
    from lane import install

    g = Guest(tmp_path_factory.mktemp("powercut"), disks=8, disk_size="1G")
    g.boot()
    install(g, Path(g.dir))
    yield g
    g.power_cut()


def sh(g, line: str, check: bool = True, timeout: float = 600):
    return g.ssh(line, check=check, timeout=timeout)


def rebal(g, args: str, check: bool = True):
    return sh(g, f"rebal --config {CFG} {args}", check=check)


def setup_guest(g) -> str:
    sh(g, f"zpool create -f -o cachefile=/etc/zfs/zpool.cache {POOL} mirror /dev/vdb /dev/vdc mirror /dev/vdd /dev/vde"
          f" && zfs create -o xattr=sa {POOL}/data"
          f" && zpool create -f -o cachefile=/etc/zfs/zpool.cache bk /dev/vdh")
    sh(g, f"mkdir -p /root/pc && python3 {CHECK} make {DATA} /root/pc/source.manifest")
    # the old vdevs at about 60% (another dataset, not rewritten): every cut rebalance of the tree is
    # steered (issue 66), the new vdev far from the threshold the runs choose (about 59% free)
    sh(g, f"zfs create -o compression=off {POOL}/filler && dd if=/dev/zero of=/{POOL}/filler/zero bs=1M count=1200 "
          f"status=none && zpool sync {POOL} && zpool add -f {POOL} mirror /dev/vdf /dev/vdg")
    # replication to the guest's own sshd, as to a backup host
    sh(g, "mkdir -p /root/pc && ssh-keygen -q -t ed25519 -N '' -f /root/pc/id -C pc && "
          "cat /root/pc/id.pub >> /root/.ssh/authorized_keys && "
          "ssh-keyscan -t ed25519 127.0.0.1 2>/dev/null > /root/pc/known_hosts && test -s /root/pc/known_hosts")
    cfg = (f'state_db = "/root/pc/state.db"\n'
           f'[[replicate]]\nname = "pcjob"\nsource = "{POOL}/data"\ntarget = "bk/copy"\ntarget_host = "127.0.0.1"\n'
           f'identity_file = "/root/pc/id"\nknown_hosts = "/root/pc/known_hosts"\nbwlimit = "4M"\n')
    sh(g, f"cat > {CFG} <<'EOF'\n{cfg}EOF\nsync")
    return "/root/pc/source.manifest"


def boot_again(g) -> None:
    g.boot()
    if sh(g, f"zpool list {POOL}", check=False).returncode != 0:
        sh(g, f"zpool import -f {POOL}")
    if sh(g, "zpool list bk", check=False).returncode != 0:
        sh(g, "zpool import -f bk")


def check(g, root: str, saved: str) -> dict:
    return json.loads(sh(g, f"python3 {CHECK} check {root} {saved}").stdout)


def test_power_cuts(guest, tmp_path):
    g = guest
    seed = int(os.environ.get("REBAL_POWERCUT_SEED", "20261123"))
    cuts = int(os.environ.get("REBAL_POWERCUT_CUTS", "10"))
    rng = random.Random(seed)
    want = setup_guest(g)
    log = []
    finished_first = []  # runs that ended before their cut came: no cut, tried again (bounded)
    i = -1
    while len(log) < cuts:
        i += 1
        assert i < cuts + 6, f"too many runs ended before their cut: {finished_first}"
        what = ("replicate" if i % 4 == 3 else "copy --hardlinks" if i % 2 else "copy")
        if what == "replicate":
            sh(g, f"echo {i} > {DATA}/cut-{i} && sync")  # something new to send each time
            sh(g, f"python3 {CHECK} save {DATA} {want}")
            cmd = f"rebal --config {CFG} replicate pcjob --json"
        else:
            extra = " --hardlinks" if "hardlinks" in what else ""
            # --all: every run has the whole tree to rewrite (a run that continues an interrupted one
            # skips what that one finished), so it is still going when the cut comes
            cmd = (f"rebal --config {CFG} rebalance {DATA} --method copy --all --allow-snapshots{extra} "
                   "--max-rate 2M --json")
        seen = {r["id"]: r["outcome"] for r in json.loads(rebal(g, "runs --limit 50 --json").stdout)["runs"]}
        sh(g, f"nohup {cmd} > /root/pc/run-{i}.out 2>&1 &")
        # cut at a random moment once the run is under way: its start event, or the receive running
        started = ("pgrep -f '[z]fs receive' >/dev/null" if what == "replicate"
                   else f"grep -q '\"start\"' /root/pc/run-{i}.out")
        r = sh(g, f"for n in $(seq 1200); do {started} && exit 0; sleep 0.1; done; cat /root/pc/run-{i}.out; exit 1",
               check=False)
        assert r.returncode == 0, f"cut {i}: the run never started: {r.stdout}"
        # the instant of the power cut (not a synchronisation): a replication is cut early, while it sends
        time.sleep(rng.uniform(0.3, 2.5) if what == "replicate" else rng.uniform(0.5, 6.0))
        at_cut = sh(g, f"pgrep -f '[r]ebal --config' >/dev/null && cat {PARAM}", check=False)
        alive = at_cut.returncode == 0
        g.power_cut()
        boot_again(g)
        # the first command after the boot: the module's default is back by itself, nothing to put back
        assert sh(g, f"cat {PARAM}").stdout.strip() == "0", (i, "the threshold survived the power cut")
        first = json.loads(rebal(g, "status --json").stdout)
        assert not [w for w in first["rebalance"] if "zfs_mg_noalloc_threshold" in w["message"]], (i, first["rebalance"])
        assert sh(g, f"cat {PARAM}").stdout.strip() == "0", i
        # the cut run: a new run, or an unfinished one it continued (a rebalance of the same targets
        # continues the last unfinished run), now listed as interrupted
        runs = json.loads(rebal(g, "runs --limit 50 --json").stdout)["runs"]
        cut = [r for r in runs if r["outcome"] == "interrupted" and seen.get(r["id"]) != "interrupted"]
        if not alive and not cut:  # it ended before the cut: nothing was cut; the tree must still be whole
            boot_checks = check(g, DATA, want)
            assert boot_checks["same"] and boot_checks["temps"] == [], (i, what, boot_checks)
            finished_first.append((i, what))
            continue
        if len(cut) != 1:
            pytest.fail(f"cut {i} ({what}): not one run newly interrupted. Before: {json.dumps(seen)}. After: "
                        f"{json.dumps([{k: r[k] for k in ('id', 'kind', 'outcome', 'error', 'started', 'ended')} for r in runs])}. "
                        f"Output: {sh(g, f'cat /root/pc/run-{i}.out').stdout[-2000:]!r}")
        cut_run = cut[0]
        assert cut_run["kind"] == ("replicate" if what == "replicate" else "rebalance"), (i, cut_run)
        if what == "replicate":
            r = json.loads(rebal(g, "replicate pcjob --json", check=False).stdout)
            assert r["outcome"] == "ok", (i, r)
            found = {"resumed": r.get("resumed"), "aborted": r.get("aborted_tokens"),
                     "kinds": [d["kind"] for d in r["datasets"]]}
            sh(g, "zfs mount bk/copy 2>/dev/null; true")
            b = check(g, "/bk/copy", want)
            assert b["same"], (i, "the backup differs from the source", b)
            sh(g, "zfs umount bk/copy")
        else:
            # recovery: the next run cleans up first; --max-bytes 1 stops it right after
            r = rebal(g, f"rebalance {DATA} --method copy --target-spread 0.01 --allow-snapshots --max-bytes 1 --json")
            notes = [json.loads(x).get("text") for x in r.stdout.splitlines() if '"note"' in x]
            found = {"notes": notes, "threshold_at_cut": int(at_cut.stdout.strip() or 0)}
        c = check(g, DATA, want)
        assert c["temps"] == [], (i, what, c["temps"])
        assert c["same"], (i, what, "the tree changed", c)
        log.append({"cut": i, "what": what, "progress": cut_run.get("progress"), **found})
    # the rebalances were cut while steered: the threshold the run set was in force at the cut (a
    # cut in the instant between the run putting it back and its exit reads 0: at most a few)
    rebalances = [e for e in log if e["what"] != "replicate"]
    steered = [e for e in rebalances if e["threshold_at_cut"] > 0]
    assert rebalances and 2 * len(steered) >= len(rebalances), log
    with open(os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl"), "a") as f:
        for entry in log:
            f.write(json.dumps({"test": "powercut", **entry}) + "\n")
        f.write(json.dumps({"test": "powercut", "ended_before_their_cut": finished_first}) + "\n")
    assert len(log) == cuts  # every cut recovered and checked (REBAL_POWERCUT_CUTS, default 10)


def test_power_cuts_on_the_receiving_side_only(tmp_path_factory):
    """Two guests: a file server that pushes, and a backup host whose power is cut while it receives
    (the file server reaches it through the host, at 10.0.2.2 and the backup guest's forwarded port).
    After each cut: the file server's run failed and says it cannot reach the backup host; the
    backup host boots, imports its pool; every snapshot it had before the cut is still there; the
    next run resumes or restarts and the backup equals the source. REBAL_POWERCUT_RECV_CUTS (3)."""
    from guest import Guest
    from lane import install

    cuts = int(os.environ.get("REBAL_POWERCUT_RECV_CUTS", "3"))
    rng = random.Random(int(os.environ.get("REBAL_POWERCUT_SEED", "20261123")) + 1)
    fs = Guest(tmp_path_factory.mktemp("fileserver"), disks=2, disk_size="1G", memory="3072")
    bk = Guest(tmp_path_factory.mktemp("backuphost"), disks=2, disk_size="1G", memory="3072")
    try:
        fs.boot()
        bk.boot()
        install(fs, Path(fs.dir))
        install(bk, Path(bk.dir))
        sh(fs, "zpool create -f -o cachefile=/etc/zfs/zpool.cache fsp /dev/vdb && zfs create fsp/data"
               " && zfs set compression=off fsp/data && mkdir -p /root/pc")
        sh(bk, "zpool create -f -o cachefile=/etc/zfs/zpool.cache bkp /dev/vdb")
        sh(fs, f"python3 {CHECK} make /fsp/data /root/pc/source.manifest")
        sh(fs, "python3 -c \"import os; f=open('/fsp/data/big.bin','wb'); [f.write(os.urandom(1<<20)) for _ in range(120)]\"")
        # the file server's job key, authorised on the backup host; the backup host's key pinned
        sh(fs, "ssh-keygen -q -t ed25519 -N '' -f /root/pc/id -C fileserver")
        pub = sh(fs, "cat /root/pc/id.pub").stdout.strip()
        sh(bk, f"echo {shlex.quote(pub)} >> /root/.ssh/authorized_keys && sync")  # it must outlive the cuts
        sh(fs, f"ssh-keyscan -p {bk.port} -t ed25519 10.0.2.2 2>/dev/null > /root/pc/known_hosts && test -s /root/pc/known_hosts")
        cfg = (f'state_db = "/root/pc/state.db"\n[[replicate]]\nname = "off"\nsource = "fsp/data"\ntarget = "bkp/copy"\n'
               f'target_host = "10.0.2.2"\ntarget_port = {bk.port}\nidentity_file = "/root/pc/id"\n'
               f'known_hosts = "/root/pc/known_hosts"\nbwlimit = "6M"\nkeepalive = 2\n')
        sh(fs, f"cat > {CFG} <<'EOF'\n{cfg}EOF\nsync")
        log = []
        for i in range(cuts):
            # 60 MiB new at 6 MB/s: the send lasts ~10 s, longer than the wait before the cut
            sh(fs, f"head -c 60M /dev/urandom > /fsp/data/recv-cut-{i} && sync && "
                   f"python3 {CHECK} save /fsp/data /root/pc/source.manifest")
            before = set(sh(bk, "zfs list -H -o name -t snapshot -r bkp 2>/dev/null; true").stdout.split())
            sh(fs, f"nohup rebal --config {CFG} replicate off --json > /root/pc/recv-{i}.out 2>&1 &")
            r = sh(bk, "for n in $(seq 1200); do pgrep -f '[z]fs receive' >/dev/null && exit 0; sleep 0.1; done; exit 1",
                   check=False)
            assert r.returncode == 0, f"recv cut {i}: the receive never started: {sh(fs, f'cat /root/pc/recv-{i}.out').stdout}"
            time.sleep(rng.uniform(0.5, 4.0))  # the instant of the cut, not a synchronisation
            bk.power_cut()
            # the file server notices (keepalives, or the connection reset) and records a failed run
            r = sh(fs, "for n in $(seq 900); do pgrep -f '[r]ebal --config' >/dev/null || exit 0; sleep 0.1; done; exit 1",
                   check=False)
            assert r.returncode == 0, f"recv cut {i}: the file server's run did not end"
            [run] = json.loads(sh(fs, f"rebal --config {CFG} runs --limit 1 --json").stdout)["runs"]
            assert run["outcome"] == "failed", (i, run)
            bk.boot()
            if sh(bk, "zpool list bkp", check=False).returncode != 0:
                sh(bk, "zpool import -f bkp")
            after = set(sh(bk, "zfs list -H -o name -t snapshot -r bkp 2>/dev/null; true").stdout.split())
            assert before <= after, (i, "snapshots lost on the backup host", before - after)
            token = sh(bk, "zfs get -H -o value receive_resume_token bkp/copy 2>/dev/null; true").stdout.strip()
            out = json.loads(sh(fs, f"rebal --config {CFG} replicate off --json", check=False).stdout)
            if out["outcome"] != "ok":
                pytest.fail(f"recv cut {i}: the next run failed: {out.get('error')} {json.dumps(out)[:2000]}")
            sh(bk, "zfs mount bkp/copy 2>/dev/null; true")
            manifest = sh(fs, "base64 -w0 /root/pc/source.manifest").stdout
            sh(bk, f"mkdir -p /root/pc && echo {manifest} | base64 -d > /root/pc/source.manifest")
            c = json.loads(sh(bk, f"python3 {CHECK} check /bkp/copy /root/pc/source.manifest").stdout)
            assert c["same"], (i, "the backup differs from the source", c)
            sh(bk, "zfs umount bkp/copy")
            if token not in ("", "-"):  # the receive kept its place: the next run takes it up from there
                assert out.get("resumed"), (i, "a resume token was there but the run did not resume", out.get("notes"))
            log.append({"cut": f"recv-{i}", "what": "receiving side", "error": run.get("error", "")[:120],
                        "token_after_boot": token not in ("", "-"), "resumed": out.get("resumed"),
                        "kinds": [d["kind"] for d in out["datasets"]]})
        with open(os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl"), "a") as f:
            for entry in log:
                f.write(json.dumps({"test": "powercut-recv", **entry}) + "\n")
        assert len(log) == cuts
    finally:
        fs.power_cut()
        bk.power_cut()

