"""Replication of a tree of datasets: rebal against bzfs, syncoid and zfs_autobackup, in one run, in
the lane's guest (tests/openzfs/vm/lane.py runs it in the full lane), as root, over a real sshd on
loopback into a second pool.

For each tree (N datasets, one level deep: N children of the root; two levels: about sqrt(N)
groups of children), every tool in turn gets the same tree made afresh from the same seed and its own
empty target, and runs three times, timed from start to end:
  full       the first run (everything sent)
  no change  a second run at once
  1% changed a third run after ceil(N/100) datasets got a new file
each in its documented nightly form: a snapshot of the tree taken and replicated over ssh
  rebal           rebal replicate JOB              (recursive job; its defaults)
  bzfs            bzfs SRC root@host:DST --recursive --create-src-snapshots (an ad hoc snapshot each run)
  syncoid         syncoid -r SRC root@host:DST     (a sync snapshot each run; Debian's sanoid)
  zfs_autobackup  zfs-autobackup --ssh-target root@host bench DST  (autobackup:bench=true on SRC)
and, as TOOL:frequent, in the form each one's documentation gives for runs every few minutes over a
big tree (issue 48): the snapshots taken by a snapshotter of their own, timed apart ("snapshotter"):
  bzfs:frequent            bzfs --recursive --cache-snapshots   (no snapshot taken by bzfs; its cache
                           skips a dataset whose snapshots_changed did not move), over a recursive
                           `zfs snapshot -r SRC@autosnap_...` before the full and the 1% run
  syncoid:frequent         syncoid -r --no-sync-snap            (over the same sanoid-named snapshots)
  zfs_autobackup:frequent  zfs-autobackup ... --no-holds --exclude-unchanged 1   (its own snapshots,
                           only where something was written: its default --min-change 1)
rebal has one form (its snapshots only where something was written; the backup's bases checked on
every run). Each row says what the runs did: new snapshots left on the source (by the tool and the
snapshotter; rebal leaves none there, its cursor is a bookmark) and new snapshots landed on the backup.
Printed: seconds per tool and run, rebal's ratio to the fastest of the others (goals: at most 1.0
on the no-change and 1% runs at N=300, at most 1.1 on the full run), the ssh connections and remote
commands rebal made (goal: the no-change count does not grow with N), its time per phase, what it
asked of the backup, a no-change run of a one-dataset job (goal: N=300 no-change within 1.5x of it,
the backup checked; issue 48's was 2x), and the 1% run against the no-change run (goal: within 1.3x;
issue 48's 1.5x). For that goal
rebal's tree and the one-dataset job run their no-change runs in turn, three rounds (tree, one, tree,
one, ...), and their medians are compared: a lone baseline taken at the start moved 2.6-4.8 s from
run to run on the same code, more than the margin the goal is judged by.
Only ratios count: 2 vCPUs under TCG, where every process start costs many times a real server's.

  python3 bench/replicate_tree.py [--sizes 10,100,300] [--depths 1,2] [--kib 1024] [--tools ...]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sshenv import start_sshd  # noqa: E402  (the tests' real sshd on loopback)

BASE = Path("/var/tmp/rebal-treebench")
SRC, DST = "tbsrc", "tbdst"
TOOLS = ("rebal", "bzfs", "syncoid", "zfs_autobackup")
FORMS = ("nightly", "frequent")
SNAPSHOTTER = ("bzfs:frequent", "syncoid:frequent")  # their snapshots come from a snapshotter
ROUNDS = 3  # rebal's paired no-change rounds (tree, one dataset) for the no-change goal
GOAL_NO_CHANGE = 1.5  # issue 67: N=300's no-change run within this of a one-dataset job's (issue 48: 2x)
GOAL_CHANGED = 1.3  # issue 67: its 1% changed run within this of its no-change run (issue 48: 1.5x)


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")
    return r


def pools(size_gib: int) -> None:
    for p in (SRC, DST):
        sh("zpool", "destroy", "-f", p, check=False)
    shutil.rmtree(BASE, ignore_errors=True)
    (BASE / "vdev").mkdir(parents=True)
    for p in (SRC, DST):
        f = BASE / "vdev" / p
        with open(f, "wb") as fh:
            fh.truncate(size_gib << 30)
        sh("zpool", "create", "-f", "-O", "atime=off", "-m", f"/{BASE.name}/{p}", p, str(f))


def tree_names(n: int, depth: int) -> list[str]:
    """The datasets under SRC/tree, parents first: n leaves (one level), or n leaves in groups."""
    if depth == 1:
        return [f"d{i:03d}" for i in range(n)]
    groups = max(1, round(math.sqrt(n)))
    out = [f"g{g:02d}" for g in range(groups)]
    out += [f"g{i % groups:02d}/d{i:03d}" for i in range(n)]
    return out


def make_tree(n: int, depth: int, kib: int, seed: int = 7) -> list[str]:
    sh("zfs", "create", f"{SRC}/tree")
    rnd = random.Random(seed)
    leaves = []
    for name in tree_names(n, depth):
        ds = f"{SRC}/tree/{name}"
        sh("zfs", "create", ds)
        if depth == 1 or "/" in name:
            with open(f"/{BASE.name}/{SRC}/tree/{name}/data", "wb") as f:
                f.write(rnd.randbytes(kib << 10))
            leaves.append(ds)
    sh("zpool", "sync", SRC, check=False)  # (zfs-fuse has no zpool sync: a trial run there)
    return leaves


def change(leaves: list[str], seed: int = 11) -> list[str]:
    k = max(1, math.ceil(len(leaves) / 100))
    rnd = random.Random(seed)
    picked = rnd.sample(leaves, k)
    for ds in picked:
        with open(f"/{BASE.name}/{ds}/new", "wb") as f:
            f.write(rnd.randbytes(64 << 10))
    sh("zpool", "sync", SRC, check=False)  # (zfs-fuse has no zpool sync: a trial run there)
    return picked


class Host:
    def __init__(self) -> None:
        self.ssh = start_sshd(BASE / "sshd")
        cfg = BASE / "bzfs_ssh_config"  # bzfs wants this substring in the file's name
        cfg.write_text(f"Host {self.ssh.host}\n  Port {self.ssh.port}\n  IdentityFile {self.ssh.identity}\n"
                       f"  UserKnownHostsFile {self.ssh.known_hosts}\n  StrictHostKeyChecking yes\n"
                       "  BatchMode yes\n  User root\n")
        self.ssh_config = cfg

    def rebal_config(self, name: str, source: str, target: str, recursive: bool) -> Path:
        p = BASE / f"rebal-{name}.toml"
        p.write_text(f'state_db = "{BASE / "state.db"}"\n' + self.ssh.config_block(
            name=name, source=source, target=target, recursive=recursive))
        return p

    def argv(self, tool: str, target: str) -> list[str]:
        h = self.ssh
        if tool == "bzfs:frequent":
            return ["bzfs", f"{SRC}/tree", f"root@{h.host}:{target}", "--recursive", "--quiet", "--cache-snapshots",
                    "--ssh-dst-config-file", str(self.ssh_config), "--log-dir", str(BASE / "bzfs-logs")]
        if tool == "syncoid:frequent":
            return ["syncoid", "-r", "--quiet", "--no-sync-snap", f"--sshport={h.port}", f"--sshkey={h.identity}",
                    f"--sshoption=UserKnownHostsFile={h.known_hosts}", f"{SRC}/tree", f"root@{h.host}:{target}"]
        if tool == "zfs_autobackup:frequent":
            return self.argv("zfs_autobackup", target) + ["--no-holds", "--exclude-unchanged", "1"]
        if tool == "rebal":
            return ["rebal", "--config", str(self.rebal_config("bench", f"{SRC}/tree", target, True)),
                    "replicate", "bench", "--json"]
        if tool == "bzfs":
            return ["bzfs", f"{SRC}/tree", f"root@{h.host}:{target}", "--recursive", "--quiet",
                    "--ssh-dst-config-file", str(self.ssh_config), "--create-src-snapshots",
                    "--create-src-snapshots-plan", "{'bench': {'onsite': {'adhoc': 1}}}",
                    "--log-dir", str(BASE / "bzfs-logs")]
        if tool == "syncoid":
            return ["syncoid", "-r", "--quiet", f"--sshport={h.port}", f"--sshkey={h.identity}",
                    f"--sshoption=UserKnownHostsFile={h.known_hosts}", f"{SRC}/tree", f"root@{h.host}:{target}"]
        if tool == "zfs_autobackup":
            # --exclude-received: source and target are on one host here, and the received copies
            # carry the selecting property too (its documentation's advice for this case)
            return ["zfs-autobackup", "--ssh-config", str(self.ssh_config), "--ssh-target", f"root@{h.host}",
                    "--no-progress", "--exclude-received", "bench", target]
        raise ValueError(tool)


def timed(argv: list[str]) -> tuple[float, str]:
    t0 = time.monotonic()
    r = sh(*argv)
    return time.monotonic() - t0, r.stdout


def destroy(ds: str) -> None:
    """``ds`` and all under it, the holds a tool left on its snapshots released first."""
    if sh("zfs", "list", ds, check=False).returncode != 0:
        return
    snaps = sh("zfs", "list", "-H", "-r", "-t", "snapshot", "-o", "name", ds).stdout.split()
    if snaps:  # (zfs-fuse has no `zfs holds`: a trial run there leaves rebal's held tree behind)
        for line in sh("zfs", "holds", "-H", *snaps, check=False).stdout.splitlines():
            if line.count("\t") >= 2:  # (zfs-fuse prints its usage)
                name, tag = line.split("\t")[:2]
                sh("zfs", "release", tag, name)
    sh("zfs", "destroy", "-r", ds)


def snapshots(ds: str) -> set[str]:
    r = sh("zfs", "list", "-H", "-r", "-t", "snapshot", "-o", "name", ds, check=False)
    return set(r.stdout.split()) if r.returncode == 0 else set()


def one_tool(host: Host, tool: str, n: int, depth: int, kib: int, one: list[str]) -> dict:
    """``tool``'s three runs on a tree made afresh (``one``: the one-dataset job's argv, whose
    no-change runs rebal's tree's are paired with)."""
    destroy(f"{SRC}/tree")
    target = f"{DST}/{tool.replace(':', '_')}"
    destroy(target)
    (BASE / "state.db").unlink(missing_ok=True)
    shutil.rmtree(Path.home() / ".cache" / "bzfs", ignore_errors=True)  # bzfs's --cache-snapshots
    leaves = make_tree(n, depth, kib)
    if tool.startswith("zfs_autobackup"):  # it selects by property, and receives under a target that exists
        sh("zfs", "set", "autobackup:bench=true", f"{SRC}/tree")
        sh("zfs", "create", target)
    out: dict = {"tool": tool}
    for i, run in enumerate(("full", "no change", "1% changed")):
        if run == "1% changed":
            change(leaves)
        before = (snapshots(f"{SRC}/tree"), snapshots(target))  # new names: a tool may prune old ones
        if tool in SNAPSHOTTER and run != "no change":  # the snapshotter's turn (sanoid's names)
            t0 = time.monotonic()
            sh("zfs", "snapshot", "-r", f"{SRC}/tree@autosnap_2026-11-28_00:0{i}:00_frequently")
            out[f"{run} snapshotter"] = round(time.monotonic() - t0, 2)
        secs, stdout = timed(host.argv(tool, target))
        if tool == "rebal" and run == "no change":
            secs = paired(out, secs, host.argv(tool, target), one)
        out[run] = round(secs, 2)
        out[f"{run} taken"] = len(snapshots(f"{SRC}/tree") - before[0])
        out[f"{run} landed"] = len(snapshots(target) - before[1])
        if tool == "rebal":
            rep = json.loads(stdout)
            out[f"{run} remote"] = rep["remote_commands"]
            out[f"{run} phases"] = rep.get("phases", {})
            out[f"{run} sent"] = sum(1 for d in rep["datasets"] if d["kind"] in ("full", "incremental"))
            out[f"{run} backup"] = (f"{rep.get('backup_asked') or '-'} {rep.get('backup_listed', 0)}"
                                      + (f", {rep['backup_recorded']} by record" if rep.get("backup_recorded") else ""))
    return out


def paired(out: dict, first: float, tree: list[str], one: list[str]) -> float:
    """The tree's and the one-dataset job's no-change runs in turn, ROUNDS of each (``first``: the
    tree's first, timed already); their runs kept in ``out``; the tree's median."""
    trees, ones, recorded = [first], [timed(one)[0]], []
    for _ in range(ROUNDS - 1):
        secs, stdout = timed(tree)
        trees.append(secs)
        recorded.append(json.loads(stdout).get("source_recorded", 0))
        ones.append(timed(one)[0])
    out["no change runs"] = [round(x, 2) for x in trees]
    out["no change source recorded"] = recorded  # datasets whose source listing rebal's record stood for
    out["one dataset runs"] = [round(x, 2) for x in ones]
    return statistics.median(trees)


def single_baseline(host: Host, kib: int) -> tuple[float, list[str]]:
    """A no-change run of a one-dataset job (the goal: a 300-dataset tree's within 1.5x of it), and
    the job's argv."""
    destroy(f"{SRC}/one")
    destroy(f"{DST}/one")
    sh("zfs", "create", f"{SRC}/one")
    with open(f"/{BASE.name}/{SRC}/one/data", "wb") as f:
        f.write(random.Random(3).randbytes(kib << 10))
    cfg = host.rebal_config("one", f"{SRC}/one", f"{DST}/one", False)
    argv = ["rebal", "--config", str(cfg), "replicate", "one", "--json"]
    sh(*argv)
    secs, _ = timed(argv)
    return round(secs, 2), argv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,100,300")
    ap.add_argument("--depths", default="1,2")
    ap.add_argument("--kib", type=int, default=1024, help="data per leaf dataset")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--json", default="/var/tmp/replicate-tree.json", help="where the figures are kept")
    args = ap.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    wrong = [t for t in tools if t.split(":")[0] not in TOOLS or t.partition(":")[2] not in ("", *FORMS)
             or t == "rebal:frequent"]
    if wrong:
        print(f"replicate_tree: no such tool or form: {', '.join(wrong)} (tools: {', '.join(TOOLS)}; "
              f"forms: TOOL:frequent, rebal has one)")
        return 2
    tools = [t.removesuffix(":nightly") for t in tools]
    missing = [t for t in tools if not shutil.which({"zfs_autobackup": "zfs-autobackup"}.get(t.split(":")[0], t.split(":")[0]))]
    if missing:
        print(f"replicate_tree: not installed: {', '.join(missing)} (the lane's image and lane.py put them in)")
        return 2
    sizes = [int(x) for x in args.sizes.split(",")]
    pools(max(2, math.ceil(max(sizes) * args.kib * 1.6 / (1 << 20)) + 1))
    host = Host()
    figures = []
    try:
        baseline, one = single_baseline(host, args.kib)
        print(f"replicate_tree: one dataset, no change: rebal {baseline:.2f} s")
        for depth in [int(x) for x in args.depths.split(",")]:
            for n in sizes:
                rows = []
                for t in tools:
                    rows.append(one_tool(host, t, n, depth, args.kib, one))
                    print(f"replicate_tree: N={n}, {depth} level(s), {t}: " + ", ".join(
                        f"{run} {rows[-1][run]:.2f}s ({_did(rows[-1], run)})" for run in ("full", "no change", "1% changed")),
                        flush=True)
                figures.append({"n": n, "depth": depth, "rows": rows, "one_dataset_no_change": baseline})
                report(n, depth, rows, baseline)
    finally:
        host.ssh.stop()
        for p in (SRC, DST):
            sh("zpool", "destroy", "-f", p, check=False)
        shutil.rmtree(BASE / "vdev", ignore_errors=True)
    Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


def _did(row: dict, run: str) -> str:
    """What a run did: new snapshots left on the source (+ the snapshotter's seconds; rebal leaves none
    there, its cursor is a bookmark) / new snapshots landed on the backup."""
    snap = f"+{row[f'{run} snapshotter']:.1f}s" if f"{run} snapshotter" in row else ""
    return f"{row.get(f'{run} taken', 0)}{snap}/{row.get(f'{run} landed', 0)}"


def report(n: int, depth: int, rows: list[dict], baseline: float) -> None:
    print(f"\nreplicate_tree: N={n} datasets, {depth} level(s) deep")
    print(f"  {'run':12} " + " ".join(f"{r['tool']:>24}" for r in rows) + "   rebal / fastest other (its snapshotter included)"
          "\n  (under each time: new snapshots left on the source [+ the snapshotter's seconds; rebal leaves none, "
          "its cursor is a bookmark] / new snapshots landed on the backup)")
    by = {r["tool"]: r for r in rows}
    for run in ("full", "no change", "1% changed"):
        # a tool's time with its snapshotter's: the same work rebal's run does
        others = [r[run] + r.get(f"{run} snapshotter", 0) for r in rows if r["tool"] != "rebal"]
        ratio = f"{by['rebal'][run] / min(others):.2f}x" if "rebal" in by and others else "-"
        print(f"  {run:12} " + " ".join(f"{r[run]:>23.2f}s" for r in rows) + f"   {ratio}")
        print(f"  {'':12} " + " ".join(f"{_did(r, run):>24}" for r in rows))
    if "rebal" in by:
        r = by["rebal"]
        print("  rebal: 1 ssh connection (one master per run); remote commands " +
              ", ".join(f"{run} {r[f'{run} remote']} ({r[f'{run} sent']} sent)" for run in ("full", "no change", "1% changed")))
        for run in ("full", "no change", "1% changed"):
            print(f"  rebal phases, {run}: " + ", ".join(f"{k} {v:.2f}s" for k, v in r[f"{run} phases"].items()))
        print("  rebal asked of the backup (bases: each base's guid; part: N datasets listed; whole: N found): " +
              ", ".join(f"{run} {r.get(f'{run} backup', '-')}" for run in ("full", "no change", "1% changed")))
        if "one dataset runs" in r:  # the paired rounds' medians (the tree's is r['no change'])
            baseline = statistics.median(r["one dataset runs"])
            print(f"  rebal no change, {ROUNDS} rounds in turn: tree {r['no change runs']} s, one dataset "
                  f"{r['one dataset runs']} s (medians {r['no change']:.2f} s, {baseline:.2f} s); the tree's rounds "
                  f"after the first with the source's listing from rebal's record: {r.get('no change source recorded')}")
        print(f"  rebal no change vs one dataset: {r['no change'] / baseline:.2f}x (goal <= {GOAL_NO_CHANGE}x)")
        print(f"  rebal 1% changed vs no change: {r['1% changed'] / r['no change']:.2f}x (goal <= {GOAL_CHANGED}x)")


if __name__ == "__main__":
    sys.exit(main())
