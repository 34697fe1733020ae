"""The OpenZFS lane: build (or reuse) the guest image, boot it, install this checkout's rebal in it,
run the tests marked `openzfs` inside it, then the host-side tests marked `openzfs_vm` (which boot
guests of their own to cut their power). Prints each pytest summary and one closing line.

    python3 tests/openzfs/vm/lane.py [-k EXPR] [--guest-only | --host-only] [--keep]
        [--quick] [--no-bench | --bench-only] [--bench-files 4000,40000] [--bench-runs N]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))
from guest import CACHE, Guest, GuestError, image_dir  # noqa: E402
from parallel import durations_from_progress, load_durations, run_streams, save_durations, split  # noqa: E402

SEED_DURATIONS = Path(__file__).with_name("durations.json")  # measured here: how a fresh machine splits
DURATIONS = CACHE / "durations.json"  # each guest test's last duration on this machine: how the streams split

SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped|xfailed|xpassed)")


def counts(text: str) -> dict[str, int]:
    """The figures of pytest's last summary line in ``text``."""
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error)", ln) and " in " in ln]
    out: dict[str, int] = {}
    if lines:
        for n, what in SUMMARY.findall(lines[-1]):
            out["error" if what.startswith("error") else what] = int(n)
    return out


COLLECTED = re.compile(r"^(\d+)(?:/\d+)? tests? collected", re.M)
NOTHING = re.compile(r"^no tests (?:collected|ran)", re.M)


def collected(text: str) -> int:
    """How many tests ``pytest --collect-only -q`` selected (its closing line: "N tests collected",
    "N/M tests collected (K deselected)" or "no tests collected")."""
    m = COLLECTED.search(text)
    if m:
        return int(m.group(1))
    if NOTHING.search(text) or "deselected" in text:
        return 0
    raise ValueError(f"no collection line in pytest's output: {text.strip()[-300:]!r}")


COLLECT_ERRORS = re.compile(r"^ERROR (\S+)", re.M)


def collection_errors(text: str) -> list[str]:
    """The test files `pytest --collect-only` could not collect (its "ERROR path" summary lines): their
    tests are in no node id the lane runs, so they would drop out of it silently."""
    return sorted(set(COLLECT_ERRORS.findall(text)))


def uncollected(rc: int, why: str, broken: list[str]) -> tuple[int, str]:
    """The verdict with the files that could not be collected: each fails the lane."""
    if not broken:
        return rc, why
    return rc or 1, f"{why}; {len(broken)} test file(s) could not be collected: {', '.join(broken)}"


def nodeids(text: str) -> list[str]:
    """The test ids `pytest --collect-only -q` lists, one a line, before its closing line."""
    return [ln.strip() for ln in text.splitlines() if "::" in ln and not ln.startswith((" ", "="))]


def verdict(code: int, got: dict[str, int], held: int | None, narrowed: bool) -> tuple[int, str]:
    """The exit code of one part of the lane and why. A lane proves only what ran: every test it
    holds must pass. Nothing collected fails unless ``-k`` narrowed the run on purpose; a skipped
    test fails (the guest has real OpenZFS, sshd and rsync: a skip there is a broken fixture);
    fewer passed than the collection held fails even when pytest itself said 0."""
    passed, skipped = got.get("passed", 0), got.get("skipped", 0)
    failed = got.get("failed", 0) + got.get("error", 0)
    if code == 5 or (held == 0 and not failed):
        return (0, "nothing selected by -k here") if narrowed else (1, "collected no test")
    if code not in (0, 1):
        return code, f"pytest exited {code} (interrupted, an internal error or a usage error)"
    if failed:
        return 1, f"{failed} failed"
    if skipped:
        return 1, f"{skipped} skipped: every lane test must run (see the SKIPPED lines above)"
    if held is not None and passed < held:
        return 1, f"{passed} passed of the {held} collected"
    if code != 0:
        return code, f"pytest exited {code}"
    return 0, f"{passed} passed of the {held if held is not None else passed} collected"


def build_deb() -> Path:
    """The Debian package of this checkout (scripts/build-deb.sh: a trixie chroot, cached)."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build-deb.sh"), str(ROOT / "dist")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=1800)
    if r.returncode != 0:
        raise GuestError(f"the .deb did not build: {r.stderr.strip()[-2000:]}")
    return Path(r.stdout.strip().splitlines()[-1])


# the replication tools bench/replicate_tree.py measures rebal against that Debian 13 does not
# package (syncoid comes with the image's sanoid): their wheels, fetched here once, pip-installed
# in the offline guest
ANCHORS = ("bzfs==1.25.0", "zfs-autobackup==3.3")
ANCHOR_CACHE = Path("/var/cache/rebal-anchors")


def anchor_wheels() -> list[Path]:
    ANCHOR_CACHE.mkdir(parents=True, exist_ok=True)
    want = {a.split("==")[0].replace("-", "_"): a for a in ANCHORS}
    have = {p.name.split("-")[0]: p for p in ANCHOR_CACHE.glob("*.whl")}
    missing = [spec for name, spec in want.items() if name not in have]
    if missing:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(ANCHOR_CACHE), *missing],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise GuestError(f"cannot fetch the bench's other tools ({', '.join(missing)}): {r.stderr.strip()[-500:]}")
        have = {p.name.split("-")[0]: p for p in ANCHOR_CACHE.glob("*.whl")}
    return [have[name] for name in want]


def install(g: Guest, work: Path, deb: Path | None = None) -> None:
    """This checkout's rebal, installed in the guest by its own pip from the source (its dependencies
    are Debian's, baked into the image: the guest has no network), and the tests beside it; the
    .deb beside them for the day-in-the-life test (which installs it with apt instead, and puts the
    pip install back after: /root/lane/pip-src), and the host's promtool where it has one."""
    g.ssh("rm -rf /root/lane && mkdir -p /root/lane/src")
    for part in ("rebal", "tests", "systemd", "bench", "scripts", "docs", "pyproject.toml", "README.md",
                 "config.example.toml"):
        g.put(ROOT / part, "/root/lane/src")
    if deb is not None:
        g.put(deb, "/root/lane")
    if Path("/usr/bin/promtool").exists():
        g.put(Path("/usr/bin/promtool"), "/usr/local/bin")
    g.ssh("mkdir -p /root/lane/anchors")
    for w in anchor_wheels():
        g.put(w, "/root/lane/anchors")
    g.ssh("pip install -q --no-deps --no-index --break-system-packages /root/lane/anchors/*.whl 2>&1 "
          "| grep -v -e WARNING -e 'as the .root. user' ; true", timeout=300)
    g.ssh("cp -a /root/lane/src /root/lane/pip-src && "
          "pip install -q --no-deps --no-index --no-build-isolation --break-system-packages --force-reinstall "
          "/root/lane/src 2>&1 | grep -v -e WARNING -e 'as the .root. user' ; rm -rf /root/lane/src/build "
          "/root/lane/src/rebal.egg-info; mv /root/lane/src/rebal /root/lane/rebal-source", timeout=300)


def streamed(argv: list[str], limit: float, label: str = "z",
             on_quiet: Callable[[str, float], None] | None = None) -> tuple[int | None, str]:
    """Run ``argv``, its output passed on as it comes (CI's log shows which test is running, and
    since when) and kept; (exit code, output), or (None, output) when it outlived ``limit`` seconds
    and was killed."""
    codes, outs = run_streams([argv], [label], limit, on_quiet)
    return codes[0], outs[0]


def run_guest_tests(args, work: Path) -> tuple[int, dict]:
    deb = None if args.bench_only else build_deb()
    g = Guest(work / "guest", disks=8, disk_size=args.disk_size, disks_4k=1)  # /dev/vdj: 4 KiB physical sectors
    t0 = time.monotonic()
    try:
        took = g.boot()
        print(f"lane: guest up in {took:.0f} s ({g.ssh('zfs version | head -1').stdout.strip()})", flush=True)
        install(g, work, deb)
        if args.bench_only:
            return run_bench(args, g), {}
        if args.guest_prep:
            g.ssh(args.guest_prep, check=False)
        marks = ("(openzfs or lane) and not openzfs_vm and not lane_long" if args.quick
                 else "(openzfs or lane) and not openzfs_vm")

        def pytest(select: str, *rest: str) -> str:
            # CI=true: a fixture that cannot find what it needs (sshd, rsync, a ZFS feature) fails
            # instead of skipping, as it does in CI's suite
            # REBAL_SEQ_STEPS / REBAL_SEQ_SEED from here: a shorter (or repeated) sequence by hand
            seq = [f"{k}={int(os.environ[k])}" for k in ("REBAL_SEQ_STEPS", "REBAL_SEQ_SEED")
                   if os.environ.get(k, "").isdigit()]
            head = ["cd /root/lane/src &&", "CI=true REBAL_LANE=openzfs", *seq, "python3 -m pytest -p no:cacheprovider",
                    "-m", shlex.quote(select)]
            return " ".join(head + (["-k", shlex.quote(args.k)] if args.k else []) + list(rest))

        # both collections at once (the guest has two CPUs; each takes some 20 s under TCG)
        with ThreadPoolExecutor(max_workers=2) as ex:
            asked = [ex.submit(g.ssh, pytest(m, "--collect-only", "-q", "tests", "2>&1"), check=False)
                     for m in (marks, f"({marks}) and lane_alone")]
            listed, alone_listed = (a.result().stdout for a in asked)
        held = collected(listed)
        broken = collection_errors(listed)
        alone = set(nodeids(alone_listed))
        together = [n for n in nodeids(listed) if n not in alone]
        print(f"lane: the guest set holds {held} tests ({len(alone)} run alone)", flush=True)
        g.ssh("rm -f /var/tmp/lane-progress.log", check=False)
        # this machine's own durations, over the ones recorded in the repository (a fresh machine, CI's,
        # has none: by test counts its two streams differed by some 400 s of a 1,500 s lane)
        durations = load_durations(SEED_DURATIONS) | load_durations(DURATIONS)
        groups = [grp for grp in split(together, durations, 1 if args.serial else 2) if grp]
        deadline = args.deadline
        report = quiet_report(g)
        outs, codes = [], []
        if groups:
            print(f"lane: {len(groups)} streams at once: " + "; ".join(" ".join(grp) for grp in groups), flush=True)
            argvs = [g._ssh_argv(pytest(f"({marks}) and not lane_alone", "-v", f"--basetemp=/var/tmp/lane-pytest-{i}",
                                        "-o addopts='-ra'", "--durations=20", *grp, "2>&1"))
                     for i, grp in enumerate(groups)]
            got_codes, got_outs = run_streams(argvs, [chr(97 + i) for i in range(len(groups))],
                                              max(60.0, deadline - time.monotonic()), report)
            codes += got_codes
            outs += got_outs
        if alone and None not in codes:
            # the streams' temporary directories (their pools are gone; pytest keeps the files) would
            # leave the guest's root too little room: seen, pytest could not make a test's directory
            print(g.ssh("rm -rf /var/tmp/lane-pytest-[0-9]*; df -h --output=avail,pcent /var/tmp | tail -1 "
                        "| sed 's/^/lane: free on the guest for the tests run alone: /'", check=False,
                        timeout=600).stdout, end="", flush=True)
            code, out = streamed(g._ssh_argv(pytest(f"({marks}) and lane_alone", "-v", "--basetemp=/var/tmp/lane-pytest-z",
                                                    "-o addopts='-ra'", "--durations=20", "tests", "2>&1")),
                                 max(60.0, deadline - time.monotonic()), on_quiet=report)
            codes.append(code)
            outs.append(out)
        progress = g.ssh("cat /var/tmp/lane-progress.log", check=False, timeout=60).stdout
        if None in codes:  # the run outlived its limit: say where the guest stood
            print(f"lane: the guest's pytest outlived {args.timeout} s: stopped; where it stood:", flush=True)
            report("limit", time.monotonic() - deadline)
            print("\n".join(progress.splitlines()[-80:]), flush=True)
            print(g.ssh("ps -eo pid,etimes,stat,args --forest | grep -v -e ' \\[' | tail -n 40", check=False,
                        timeout=60).stdout, flush=True)
        else:
            save_durations(DURATIONS, durations_from_progress(progress))
        figures = g.ssh("cat /var/tmp/lane-figures.jsonl", check=False).stdout  # the tests' measured figures
        for line in figures.splitlines():
            print(f"lane figure: {line}", flush=True)
        print(f"lane: guest tests took {time.monotonic() - t0:.0f} s", flush=True)
        got: dict[str, int] = {}
        for out in outs:
            for k, v in counts(out).items():
                got[k] = got.get(k, 0) + v
        code = 124 if None in codes else max((c for c in codes if c != 5), default=5)
        rc, why = verdict(code, got, held, bool(args.k))
        rc, why = uncollected(rc, why, broken)  # a file that cannot be imported: its tests never ran
        print(f"lane: guest tests: {why}", flush=True)
        if args.bench and not args.k:
            rc = rc or run_bench(args, g)
        return rc, got
    finally:
        if args.keep:
            print(f"lane: guest kept running: ssh -i {g.key} -p {g.port} root@127.0.0.1", flush=True)
        else:
            g.shutdown(timeout=30)  # then cut: the overlay is thrown away, and CI's SIGKILL is 60 s behind


def quiet_report(g: Guest) -> Callable[[str, float], None]:
    """What the lane prints when a stream of guest tests is silent for minutes: the test it is in (the
    progress log), the guest's load, the room on its root (the tests' pools are sparse files there: a
    full root suspends them), its memory and the kernel's word on OOM kills, hung tasks and suspended
    pools, the pools' health, and the oldest ZFS, rsync and rebal processes."""
    probe = ("tail -n 3 /var/tmp/lane-progress.log; uptime; df -h --output=avail,pcent /var/tmp | tail -1; "
             "free -m | head -n 2; dmesg | grep -i -E 'out of memory|oom-kill|blocked for more|suspended' | tail -n 5; "
             "timeout 20 zpool list -H -o name,health,alloc 2>&1 | head -n 12; "
             "ps -eo pid,etimes,stat,wchan:24,args --sort=-etimes | grep -E '(zfs |zpool |rsync|ssh|mbuffer|-m rebal )' "
             "| grep -v grep | head -n 15")

    def report(label: str, quiet: float) -> None:
        try:
            seen = g.ssh(probe, check=False, timeout=90).stdout
        except subprocess.SubprocessError as e:
            seen = f"(the guest did not answer: {e})\n"
        print(f"lane: [{label}] nothing printed for {quiet:.0f} s; in the guest:\n"
              + "".join(f"lane:   {line}\n" for line in seen.splitlines()), end="", flush=True)
    return report


def run_bench(args, g: Guest) -> int:
    """bench/openzfs_rewrite.py and bench/replicate_tree.py in the guest (``--benches``), ``--bench-runs``
    times each; the exit code of the worst."""
    rc = 0
    # the guest tests' leftovers (pytest keeps its temporary directories) would leave the bench's
    # sparse vdevs too little room on the guest's root: seen, the bench's pool was suspended
    g.ssh("rm -rf /var/tmp/lane-pytest* /var/tmp/rebal-rwbench*", check=False, timeout=600)
    benches = {"rewrite": (f"bench/openzfs_rewrite.py --files {shlex.quote(args.bench_files)} {args.bench_args}", 7200),
               "tree": (f"bench/replicate_tree.py --sizes {shlex.quote(args.tree_sizes)} "
                        f"--depths {shlex.quote(args.tree_depths)} --tools {shlex.quote(args.tree_tools)}", 14400),
               "snapshots": (f"bench/snapshots_zfs.py --counts {shlex.quote(args.snap_counts)} "
                             f"--tools {shlex.quote(args.snap_tools)} --runs {args.snap_runs} --wipe-disks /dev/vdb,/dev/vdc", 14400),
               "steer": ("bench/steer.py --runs 3", 7200)}
    for name, (command, limit) in benches.items():
        for i in range(args.bench_runs if name in args.benches else 0):
            t1 = time.monotonic()
            sys.stdout.flush()  # the bench's lines go straight to the lane's output as they come (-u: not
            b = subprocess.run(g._ssh_argv(f"cd /root/lane/src && python3 -u {command} 2>&1"),  # held to the end)
                               stdin=subprocess.DEVNULL, timeout=limit)
            print(f"lane: bench run {i + 1} of {args.bench_runs} ({command}) "
                  f"took {time.monotonic() - t1:.0f} s, exit {b.returncode}", flush=True)
            rc = rc or b.returncode
    return rc


def run_host_tests(args) -> tuple[int, dict]:
    env = dict(os.environ, REBAL_LANE_HOST="1")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "openzfs_vm", "-q", "-o", "addopts=-ra",
            str(ROOT / "tests" / "openzfs")]
    if args.k:
        argv += ["-k", args.k]
    c = subprocess.run(argv + ["--collect-only"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, timeout=600)
    held = collected(c.stdout)
    broken = collection_errors(c.stdout)
    r = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, timeout=args.timeout)
    sys.stdout.write(r.stdout)
    got = counts(r.stdout)
    rc, why = verdict(r.returncode, got, held, bool(args.k))
    rc, why = uncollected(rc, why, broken)  # a file that cannot be imported: its tests never ran
    print(f"lane: host tests: {why}", flush=True)
    return rc, got


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", help="only tests matching this pytest expression")
    ap.add_argument("--guest-only", action="store_true")
    ap.add_argument("--host-only", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the guest running (for a look inside)")
    ap.add_argument("--no-bench", dest="bench", action="store_false",
                    help="skip bench/openzfs_rewrite.py after the guest tests")
    ap.add_argument("--bench-files", default="4000,40000", help="file counts of the rewrite bench")
    ap.add_argument("--bench-runs", type=int, default=1, help="how many times the bench runs")
    ap.add_argument("--bench-args", default="", help="more arguments of bench/openzfs_rewrite.py (a shell line: "
                    "e.g. --bench-files '' --bench-args '--copy-files 4000 --copy-runs 3 --profile')")
    ap.add_argument("--tree-sizes", default="10,100,300", help="dataset counts of the replication tree bench")
    ap.add_argument("--tree-depths", default="1,2", help="levels of the replication tree bench's trees")
    ap.add_argument("--tree-tools", default="rebal,bzfs,syncoid,zfs_autobackup",
                    help="the tree bench's tools (syncoid and zfs_autobackup take hours at N=300 under TCG)")
    ap.add_argument("--benches", default="rewrite,tree", help="which benches: steer (bench/steer.py), rewrite "
                    "(bench/openzfs_rewrite.py), tree (bench/replicate_tree.py), snapshots (bench/snapshots_zfs.py)")
    ap.add_argument("--snap-counts", default="1000,10000", help="snapshot counts of the many-snapshots bench")
    ap.add_argument("--snap-runs", type=int, default=1,
                    help="times rebal's changed run and each anchor run at each count of that bench (its median printed)")
    ap.add_argument("--disk-size", default="2G", help="size of the guest's eight data disks (sparse files on the "
                    "host; the tests need 2G, the many-snapshots bench at 10,000 some 32G)")
    ap.add_argument("--snap-tools", default="rebal,bzfs,syncoid,zfs_autobackup", help="the many-snapshots bench's tools")
    ap.add_argument("--bench-only", action="store_true", help="boot, install and run only the bench (no tests)")
    ap.add_argument("--timeout", type=int, default=None,
                    help="seconds the guest's tests (boot and install included) or the host's may take "
                         "(default: 1 hour for --quick, 5 for the full set, whose 1,000-step sequence "
                         "alone takes over 2 under TCG)")
    ap.add_argument("--guest-prep", metavar="CMD",
                    help="a shell line run in the guest before its tests (e.g. to show that a lane without "
                         "sshd fails: --guest-prep 'rm /usr/sbin/sshd')")
    ap.add_argument("--serial", action="store_true",
                    help="one stream of guest tests instead of two at once (then those marked lane_alone)")
    ap.add_argument("--quick", action="store_true",
                    help="leave out the tests marked lane_long (CI's lane: about 10 minutes instead of 30)")
    args = ap.parse_args()
    if args.timeout is None:
        args.timeout = 3600 if args.quick else 5 * 3600
    # the limit counts from here, boot and install included: the lane then has its report printed
    # and its guest down before whoever gave it the limit (CI's script) gives up on it
    args.deadline = time.monotonic() + args.timeout
    # a SIGTERM (CI's outer timeout) unwinds like ^C: the guest is shut down, no qemu is left behind
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() != 0:
        print("lane: run as root (the image build uses debootstrap and chroot)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        image_dir(build=True)
    except GuestError as e:
        print(f"lane: {e}", file=sys.stderr)
        return 2
    print(f"lane: image ready after {time.monotonic() - t0:.0f} s", flush=True)
    total: dict[str, int] = {}
    rc = 0
    with tempfile.TemporaryDirectory(prefix="rebal-lane-", dir="/var/tmp") as tmp:
        parts = []
        if not args.host_only:
            parts.append(lambda: run_guest_tests(args, Path(tmp)))
        if not args.guest_only and not args.bench_only:
            parts.append(lambda: run_host_tests(args))
        for part in parts:
            try:
                code, c = part()
            except (GuestError, subprocess.SubprocessError, OSError, ValueError) as e:
                print(f"lane: {e}", file=sys.stderr)
                code, c = 1, {"error": 1}
            except KeyboardInterrupt:
                print(f"lane: stopped after {time.monotonic() - t0:.0f} s (interrupted, or CI's time limit)",
                      file=sys.stderr, flush=True)
                code, c = 124, {"error": 1}
                parts = []
            rc = rc or code
            for k, v in c.items():
                total[k] = total.get(k, 0) + v
            if not parts:
                break
    failed = total.get("failed", 0) + total.get("error", 0)
    print(f"lane: took {time.monotonic() - t0:.0f} s", flush=True)
    print(f"lane: {total.get('passed', 0)} passed, {failed} failed, {total.get('skipped', 0)} skipped", flush=True)
    return rc or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
