"""A dataset with many snapshots, on real ZFS (issue 48, item 4): what a replication run costs as the
snapshots grow, rebal against the bare ZFS commands of the same steps and against bzfs and syncoid,
in the lane's guest (tests/openzfs/vm/lane.py runs it: `--benches snapshots`), as root, over a real
sshd on loopback into a second pool. bench/snapshots.py measures rebal's own work without ZFS.

For each count N: a dataset holding N + P of a job's snapshots (P = 1,000, or N where N is smaller,
so a smoke run at --counts 10,20 takes minutes), one a minute by rebal's names, each in its own
transaction group through libzfs_core; the backup a copy of it with all of them
(the pool's mirror split off: the same guids, unmounted as a received backup is). Then, each step
timed from start to end:
  bare      the same steps as bare commands: the fast listing of both sides (`zfs list -Hp -t all
            -o name,guid,createtxg`, each over ssh for the backup), a snapshot and its incremental
            `zfs send -i | ssh zfs receive` (and its estimate `zfs send -nP`, with -I and with -i),
            and, after rebal's and the anchors' runs, the P oldest left destroyed on both sides with
            one comma list each (`zfs destroy DS@A,B,...`: one lzc_destroy_snaps)
  rebal     `rebal replicate` of the job, adopting the backup (no record: both sides listed whole),
            its retention set to prune the P oldest on each side (`last`, the rest 0): planning,
            sending the newest and pruning P at once; its phases as its report gives them.
            Then a changed run after a small write, with rebal's record (the bases asked by name,
            the backup's snapshots from its record while their `snapshots_changed` stands), --runs
            times (the median printed; each anchor run as many times, after rebal's)
  bzfs      after rebal, before the bare prune, on the N + 2 snapshots a side rebal left:
            `bzfs SRC root@host:DST` after a new snapshot (planning over them, sending the newest);
            syncoid `--no-sync-snap` the same; zfs_autobackup `--other-snapshots --no-thinning` its
            own new snapshot (it plans over every snapshot, the job's being the common ones).
            An anchor that fails is said, and the others go on
Printed: seconds per step and N, and each one's growth per snapshot against the smallest N (1.00x:
linear; the goal: no step of rebal's grows faster than the bare commands' by more than 1.5x).
Pruning by the anchors is not timed: bzfs's --delete-dst-snapshots needs a filter plan of its own
and syncoid leaves pruning to sanoid; the bare comma-list destroy is the floor.
Only ratios count: 2 vCPUs under TCG, where every process start costs many times a real server's.

    python3 bench/snapshots_zfs.py [--counts 1000,10000] [--tools rebal,bzfs,syncoid,zfs_autobackup] [--runs 3]
        [--wipe-disks /dev/vdb,/dev/vdc]

The lane runs it on two of its guest's disks: `scripts/test-openzfs.sh --guest-only --bench-only
--benches snapshots --snap-counts 10000 --snap-runs 3 --disk-size 32G`; a smoke run: `--snap-counts 10,20` (making
snapshots slows as they grow:
the 1st, 2nd and 3rd thousand took 52, 94 and 144 s, and the pool's allocation grew with them).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from rebal.replicate.policy import snapshot_name  # noqa: E402
from sshenv import start_sshd  # noqa: E402  (the tests' real sshd on loopback)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replicate_tree import sh  # noqa: E402

BASE = Path("/var/tmp/rebal-snapbench")
SRC, DST, JOB = "sbsrc", "sbdst", "snap"
PRUNE = 1000
GOAL = 1.5
ANCHORS = ("bzfs", "syncoid", "zfs_autobackup")


def pruned(n: int) -> int:
    """How many snapshots a side the runs at count ``n`` prune: PRUNE, or n where it is smaller (after
    rebal's prune n + 1 are left, and the bare commands prune as many again)."""
    return min(PRUNE, n)


def make(n: int, vdevs: list[str]) -> tuple[str, str, list[str]]:
    """SRC/dN with n + pruned(n) of the job's snapshots, and its backup DST/dN holding the same ones (the
    same guids); their names, oldest first. The backup is SRC's mirror split off (`zpool split`):
    receiving n snapshots would take four times as long as making them (a txg each, and more).
    The mirror's two sides are ``vdevs`` (two disks) or, without them, two 1 GiB files."""
    clear(vdevs)
    if vdevs:
        sides, search = vdevs, ["-d", "/dev"]
    else:
        (BASE / "vdev").mkdir(parents=True)
        sides = [str(BASE / "vdev" / f"{SRC}-{i}") for i in (0, 1)]
        for f in sides:
            with open(f, "wb") as fh:
                fh.truncate(1 << 30)  # sparse, but each txg touches new parts: 2 GiB a file filled the guest's disk
        search = ["-d", str(BASE / "vdev")]
    sh("zpool", "create", "-f", "-O", "atime=off", "-m", f"/{BASE.name}/{SRC}", SRC, "mirror", *sides)
    src, dst = f"{SRC}/d{n}", f"{DST}/d{n}"
    sh("zfs", "create", src)
    with open(f"/{BASE.name}/{src}/f", "wb") as f:
        f.write(b"x" * (1 << 20))
    start = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=n + pruned(n) + 5)
    names = [snapshot_name(JOB, start + timedelta(minutes=i)) for i in range(n + pruned(n))]
    t0 = time.monotonic()
    snapshot_each([f"{src}@{s}" for s in names])
    made = time.monotonic() - t0
    sh("zpool", "split", SRC, DST, sides[1])
    sh("zpool", "import", "-N", *search, DST)  # unmounted, as a received backup is
    print(f"snapshots_zfs: N={n}: {len(names)} snapshots made in {made:.1f} s", flush=True)
    return src, dst, names


def clear(vdevs: list[str]) -> None:
    """The bench's pools gone, and their vdevs: files removed, disks' labels cleared."""
    for p in (SRC, DST):
        sh("zpool", "destroy", "-f", p, check=False)
    shutil.rmtree(BASE / "vdev", ignore_errors=True)
    for d in vdevs:
        sh("zpool", "labelclear", "-f", d, check=False)


def snapshot_each(names: list[str]) -> None:
    """One snapshot a transaction group (ZFS takes one snapshot of a dataset per txg: `zfs snapshot
    A@x A@y` is refused), through libzfs_core where pyzfs loads: no process a snapshot."""
    try:
        from libzfs_core import lzc_snapshot
    except ImportError:
        for name in names:
            sh("zfs", "snapshot", name)
        return
    for name in names:
        lzc_snapshot([name.encode()])


def pipe(send: list[str], receive: list[str]) -> None:
    """``send | receive``, both checked (no shell)."""
    a = subprocess.Popen(send, stdout=subprocess.PIPE)
    b = subprocess.run(receive, stdin=a.stdout, capture_output=True, text=True)
    a.stdout.close()
    if a.wait() != 0 or b.returncode != 0:
        raise RuntimeError(f"{' '.join(send)} | {' '.join(receive)} failed: {b.stderr.strip()[-800:]}")


class Bench:
    def __init__(self, runs: int = 1) -> None:
        self.runs = runs  # the changed runs of rebal (with its record) and of each anchor, each timed
        self.ssh = start_sshd(BASE / "sshd")
        h = self.ssh
        self.remote = ["ssh", "-p", str(h.port), "-i", str(h.identity), "-o", f"UserKnownHostsFile={h.known_hosts}",
                       "-o", "BatchMode=yes", f"root@{h.host}"]
        self.bzfs_config = BASE / "bzfs_ssh_config"  # bzfs wants this substring in the file's name
        self.bzfs_config.write_text(f"Host {h.host}\n  Port {h.port}\n  IdentityFile {h.identity}\n"
                                    f"  UserKnownHostsFile {h.known_hosts}\n  StrictHostKeyChecking yes\n"
                                    "  BatchMode yes\n  User root\n")

    def timed(self, *argv: str) -> tuple[float, str]:
        t0 = time.monotonic()
        out = sh(*argv).stdout
        return round(time.monotonic() - t0, 2), out

    def bare(self, src: str, dst: str, names: list[str]) -> dict:
        out = {}
        for pass_ in ("cold", "warm"):  # the first after the import reads from disk
            out[f"list source {pass_}"], text = self.timed("zfs", "list", "-Hp", "-t", "all", "-o",
                                                           "name,guid,createtxg", "-r", src)
            assert text.count("@") >= len(names)
            out[f"list backup {pass_}"], _ = self.timed(
                *self.remote, f"zfs list -Hp -t all -o name,guid,createtxg -r {shlex.quote(dst)}")
        new = snapshot_name(JOB, datetime.now(timezone.utc) - timedelta(minutes=3))
        t0 = time.monotonic()
        sh("zfs", "snapshot", f"{src}@{new}")
        pipe(["zfs", "send", "-i", f"@{names[-1]}", f"{src}@{new}"], self.remote + [f"zfs receive -u {shlex.quote(dst)}"])
        out["send newest"] = round(time.monotonic() - t0, 2)
        # what `-I` costs over `-i` for the same one step (zfs plans -I by gathering every snapshot of
        # the dataset; rebal sends -i where nothing lies between its base and its new snapshot)
        for flag in ("-I", "-i"):
            out[f"estimate {flag}"], _ = self.timed("zfs", "send", "-nP", flag, f"@{names[-1]}", f"{src}@{new}")
        names.append(new)
        return out

    def bare_prune(self, src: str, dst: str, names: list[str], prune: int) -> dict:
        """The floor of pruning: the ``prune`` oldest left after rebal's run (the next thousand after the
        ones rebal pruned: no easier, since a snapshot's deadlist holds a key for each older one) in
        one comma list a side, one lzc_destroy_snaps (a range `@a%b` is slower: the zfs command lists
        every snapshot of the dataset to resolve it; measured 4.2 s against 1.3 s for 100 of 1,000)."""
        listed = "@" + ",".join(names[:prune])
        t0 = time.monotonic()
        sh("zfs", "destroy", src + listed)
        sh(*self.remote, f"zfs destroy {shlex.quote(dst + listed)}")
        secs = round(time.monotonic() - t0, 2)
        left = len(sh("zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", src).stdout.split())
        if left != len(names) - prune:
            raise RuntimeError(f"the bare prune of {prune} of {len(names)} snapshots left {left}")
        del names[:prune]
        return {"prune oldest": secs}

    def rebal(self, src: str, dst: str, names: list[str], prune: int) -> dict:
        # its first run prunes the ``prune`` oldest on each side (its own new snapshot kept too)
        keep = {"last": len(names) - prune + 1, "hourly": 0, "daily": 0, "weekly": 0, "monthly": 0}
        cfg = BASE / "rebal.toml"
        cfg.write_text(f'state_db = "{BASE / "state.db"}"\n' + self.ssh.config_block(
            name=JOB, source=src, target=dst, retention_source=keep, retention_target=keep))
        (BASE / "state.db").unlink(missing_ok=True)
        out: dict = {}
        agains: list[tuple[float, dict]] = []
        for run in ["adopt"] + ["again"] * self.runs:
            with open(f"/{BASE.name}/{src}/f", "ab") as f:  # something to send: a run with nothing
                f.write(b"y" * 4096)  # written since its base sends nothing and prunes nothing
            secs, text = self.timed("rebal", "--config", str(cfg), "replicate", JOB, "--json")
            if run == "adopt":
                self.figures(out, "adopt", secs, json.loads(text))
            else:
                agains.append((secs, json.loads(text)))
        out["again runs"] = [secs for secs, _ in agains]
        self.figures(out, "again", *sorted(agains, key=lambda a: a[0])[(len(agains) - 1) // 2])  # the median (low)
        names[:] = sh("zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-s", "createtxg", "-d", "1",
                      src).stdout.split()
        names[:] = [n.split("@", 1)[1] for n in names]
        return out

    @staticmethod
    def figures(out: dict, run: str, secs: float, rep: dict) -> None:
        out[run] = secs
        out[f"{run} phases"] = rep.get("phases", {})
        out[f"{run} pruned"] = (len(rep.get("pruned_source", [])), len(rep.get("pruned_target", [])))
        out[f"{run} commands"] = rep.get("remote_commands")
        out[f"{run} backup"] = (f"{rep.get('backup_asked') or '-'} {rep.get('backup_listed', 0)}"
                                + (f", {rep['backup_recorded']} by record" if rep.get("backup_recorded") else ""))

    def anchor(self, tool: str, src: str, dst: str, names: list[str]) -> float | str:
        """Seconds for ``tool`` to bring the backup up to the source's newest snapshot (bzfs and syncoid
        send one made for them; zfs_autobackup its own, across the job's with --other-snapshots); what
        went wrong instead, so one anchor failing at 11,000 snapshots does not lose the others' figures."""
        h = self.ssh
        if tool == "zfs_autobackup":
            # it selects by property and plans over every snapshot (--other-snapshots: the job's are the
            # common ones); no thinning (pruning is not what is timed), received under DST as dN
            sh("zfs", "set", "autobackup:sb=true", src)
            argv = ["zfs-autobackup", "--ssh-config", str(self.bzfs_config), "--ssh-target", f"root@{h.host}",
                    "--no-progress", "--exclude-received", "--other-snapshots", "--no-thinning",
                    "--strip-path", "1", "sb", DST]
        else:
            sh("zfs", "snapshot", f"{src}@{tool}-newest-{len(names)}")
            if tool == "bzfs":
                argv = ["bzfs", src, f"root@{h.host}:{dst}", "--quiet", "--ssh-dst-config-file",
                        str(self.bzfs_config), "--log-dir", str(BASE / "bzfs-logs")]
            else:
                argv = ["syncoid", "--quiet", "--no-sync-snap", f"--sshport={h.port}", f"--sshkey={h.identity}",
                        f"--sshoption=UserKnownHostsFile={h.known_hosts}", src, f"root@{h.host}:{dst}"]
        t0 = time.monotonic()
        r = sh(*argv, check=False)
        secs = round(time.monotonic() - t0, 2)
        newest = sh("zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-s", "createtxg", "-d", "1",
                    src).stdout.split()[-1].split("@", 1)[1]
        names.append(newest)
        got = sh(*self.remote, f"zfs list -H -o name {shlex.quote(f'{dst}@{newest}')}", check=False)
        if r.returncode != 0 or got.returncode != 0:
            why = f"{tool} exited {r.returncode}, the backup " + ("has" if got.returncode == 0 else "lacks") + \
                f" @{newest}: {(r.stderr or r.stdout).strip()[-300:]}"
            print(f"snapshots_zfs: {why}", flush=True)
            return why
        return secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1000,10000")
    ap.add_argument("--tools", default="rebal," + ",".join(ANCHORS))
    ap.add_argument("--runs", type=int, default=1,
                    help="how many times rebal's changed run and each anchor run at each count (the median is printed)")
    ap.add_argument("--json", default="/var/tmp/snapshots-zfs.json", help="where the figures are kept")
    ap.add_argument("--wipe-disks", default="", metavar="DISK,DISK",
                    help="two disks for the mirror, WHATEVER THEY HOLD IS DESTROYED (the lane's guest: /dev/vdb,/dev/vdc, "
                    "sized by lane.py --disk-size); without them two 1 GiB files, room for about 5,000 snapshots")
    args = ap.parse_args()
    vdevs = [d for d in args.wipe_disks.split(",") if d]
    if vdevs and (len(vdevs) != 2 or not all(Path(d).is_block_device() for d in vdevs)):
        print(f"snapshots_zfs: --wipe-disks takes two disks: {args.wipe_disks}")
        return 2
    try:
        counts = [int(c) for c in args.counts.split(",")]
    except ValueError:
        counts = [0]
    if min(counts) < 10:
        print(f"snapshots_zfs: --counts: whole numbers, at least 10 each ({args.counts})")
        return 2
    tools = [t for t in args.tools.split(",") if t]
    missing = [t for t in tools if not shutil.which(t.replace("zfs_autobackup", "zfs-autobackup"))]
    if missing:
        print(f"snapshots_zfs: not installed: {', '.join(missing)} (the lane's image and lane.py put them in)")
        return 2
    (BASE / "vdev").mkdir(parents=True, exist_ok=True)
    bench = Bench(max(1, args.runs))
    figures: dict[int, dict] = {}
    try:
        for n in counts:
            src, dst, names = make(n, vdevs)
            row = {"bare": bench.bare(src, dst, names)}
            if "rebal" in tools:
                row["rebal"] = bench.rebal(src, dst, names, pruned(n))
            row["anchors planned over"] = len(names)  # n + 2: rebal's prune left them
            for tool in ANCHORS:  # before the bare prune, which would leave them 2 snapshots at n=1,000
                if tool in tools:
                    got = [bench.anchor(tool, src, dst, names) for _ in range(args.runs)]
                    times = [t for t in got if not isinstance(t, str)]
                    row[tool] = statistics.median_low(times) if len(times) == len(got) else next(
                        t for t in got if isinstance(t, str))
                    row[f"{tool} runs"] = got
            row["bare"].update(bench.bare_prune(src, dst, names, pruned(n)))
            figures[n] = row
            print(f"snapshots_zfs: N={n}: {json.dumps(row)}", flush=True)
    finally:
        bench.ssh.stop()
        clear(vdevs)
    Path(args.json).write_text(json.dumps(figures, indent=1))
    report(counts, figures)
    return 0


def report(counts: list[int], figures: dict[int, dict]) -> None:
    base = counts[0]
    print(f"\nsnapshots_zfs: seconds, and growth per snapshot against N={base}, on the snapshots each step ran over "
          "(1.00x: linear)")
    steps: list[tuple[str, object]] = [(f"bare {k}", ("bare", k)) for k in figures[base]["bare"]]
    if "rebal" in figures[base]:
        steps += [("rebal adopt (whole run)", ("rebal", "adopt")), ("rebal again (whole run)", ("rebal", "again"))]
        steps += [(f"rebal adopt {p}", ("rebal", "adopt phases", p)) for p in figures[base]["rebal"]["adopt phases"]]
    steps += [(t, (t,)) for t in ANCHORS if t in figures[base]]

    def get(n: int, path) -> float | None:
        v = figures[n]
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        return None if v is None or isinstance(v, str) else float(v)  # str: what went wrong (printed)

    def over(n: int, path) -> int:
        """The snapshots a side the step ran over: n + pruned(n) until rebal's first prune, n + 2 after it
        (its second run, the anchors, the bare prune), not n: at n=1,000 that is 2,000 against 1,002."""
        later = path[0] in ANCHORS or path[:2] == ("rebal", "again") or path == ("bare", "prune oldest")
        return figures[n].get("anchors planned over", n + 2) if later else n + pruned(n)

    for label, path in steps:
        cells = []
        for n in counts:
            secs, first = get(n, path), get(base, path)
            if secs is None:
                cells.append(f"N={n}   failed")
                continue
            grow = f" {(secs / over(n, path)) / max(first / over(base, path), 1e-9):5.2f}x" \
                if n != base and first is not None else ""
            cells.append(f"N={n} {secs:8.2f} s" + grow)
        print(f"  {label:34} " + "   ".join(cells))
    print("  the anchors planned over (snapshots a side): " +
          ", ".join(f"N={n} {figures[n].get('anchors planned over', '-')}" for n in counts))
    if "rebal" in figures[base]:
        r = {n: figures[n]["rebal"] for n in counts}
        print("  rebal pruned (source, backup): " + ", ".join(f"N={n} {r[n]['adopt pruned']}" for n in counts))
        print("  rebal asked of the backup (adopt, again): " +
              ", ".join(f"N={n} {r[n]['adopt backup']}, {r[n]['again backup']}" for n in counts))
        print("  rebal remote commands (adopt, again): " +
              ", ".join(f"N={n} {r[n]['adopt commands']}, {r[n]['again commands']}" for n in counts))
        print("  rebal's changed runs (s, the median above): " +
              ", ".join(f"N={n} {r[n].get('again runs')}" for n in counts))
    for tool in ANCHORS:
        if tool in figures[base]:
            print(f"  {tool}'s runs (s, the median above): " +
                  ", ".join(f"N={n} {figures[n].get(f'{tool} runs')}" for n in counts))


if __name__ == "__main__":
    sys.exit(main())
