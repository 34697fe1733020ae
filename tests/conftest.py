from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from zfsenv import create_pool, zfs_problem  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
IN_LANE = os.environ.get("REBAL_LANE") == "openzfs"  # inside the OpenZFS guest (tests/openzfs/vm/lane.py)
LANE_HOST = os.environ.get("REBAL_LANE_HOST") == "1"  # the lane's host side, which boots guests


def pytest_addoption(parser):
    parser.addoption("--sequence-steps", type=int, default=None,
                     help="steps of the sequence test (default 60, or REBAL_SEQ_STEPS)")
    parser.addoption("--sequence-seed", type=int, default=None,
                     help="seed of the sequence test (default: drawn anew, or REBAL_SEQ_SEED)")


@pytest.fixture
def sequence(request) -> tuple[int, int]:
    """(steps, seed) of a sequence test: the options, the environment, or 60 and a seed drawn now."""
    import random

    steps = request.config.getoption("--sequence-steps") or int(os.environ.get("REBAL_SEQ_STEPS", "60"))
    seed = request.config.getoption("--sequence-seed")
    if seed is None:
        seed = int(os.environ["REBAL_SEQ_SEED"]) if os.environ.get("REBAL_SEQ_SEED") else random.SystemRandom().randrange(10**6)
    print(f"sequence: {steps} steps, seed {seed} (--sequence-seed {seed} repeats it)")
    return steps, seed


TEST_LIMIT = int(os.environ.get("REBAL_TEST_LIMIT", "900" if IN_LANE else "600"))  # seconds a test may take
LANE_PROGRESS = Path(os.environ.get("REBAL_LANE_PROGRESS", "/var/tmp/lane-progress.log"))  # the guest's running record: which test, how long


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test has a limit (``lane_limit(seconds)`` marker, else REBAL_TEST_LIMIT: 600 s on the
    host, 900 s in the lane's guest): past it the test fails with what it still ran, whether the
    ZFS daemon answers and the stacks of where it hung (tests/hang.py), instead of one hung command
    eating the whole run's bound in silence (seen: CI's lane stopped after 58 minutes, 0 passed;
    CI's suite after 40, nothing said of which test). In the guest the report also goes to
    /var/tmp/lane-progress.log, which says when each test started and ended."""
    import signal
    import time

    from hang import HungTestError, report

    mark = item.get_closest_marker("lane_limit")
    limit = int(mark.args[0]) if mark else TEST_LIMIT
    t0 = time.monotonic()

    def over(signum, frame):
        signal.alarm(120)  # a teardown that hangs too (a suspended pool) is ended in its turn
        text = report(item.nodeid, limit)
        if IN_LANE:
            with LANE_PROGRESS.open("a") as f:
                f.write(text)
        capture = item.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():  # said now, on the run's own stderr: a run
            sys.stderr.write(f"\nhung: {text}\n")  # stopped by its bound prints no summary
            sys.stderr.flush()
        raise HungTestError(text)

    if IN_LANE:
        with LANE_PROGRESS.open("a") as f:
            f.write(f"start {item.nodeid} (limit {limit} s)\n")
    old = signal.signal(signal.SIGALRM, over)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        if IN_LANE:
            with LANE_PROGRESS.open("a") as f:
                f.write(f"end {item.nodeid} {time.monotonic() - t0:.0f} s\n")


def pytest_collection_modifyitems(config, items):
    """The OpenZFS lane's tests run only there: `bash scripts/test-openzfs.sh` (CI runs it too)."""
    skip_guest = pytest.mark.skip(reason="needs real OpenZFS: runs in the lane (bash scripts/test-openzfs.sh)")
    skip_host = pytest.mark.skip(reason="boots OpenZFS guests: runs in the lane (bash scripts/test-openzfs.sh)")
    for item in items:
        if item.get_closest_marker("openzfs") and not IN_LANE:
            item.add_marker(skip_guest)
        if item.get_closest_marker("openzfs_vm") and not LANE_HOST:
            item.add_marker(skip_host)


def fixture_text(name: str) -> str:
    for sub in ("openzfs", "zfs-fuse"):  # noqa: B007
        p = FIXTURES / sub / name
        if p.exists():
            return p.read_text()
    raise FileNotFoundError(name)


@pytest.fixture(scope="session")
def zfs_ready() -> None:
    """Real ZFS is required. Skips where there is none; in CI a missing ZFS fails the test instead."""
    problem = zfs_problem()
    if problem:
        if IN_CI:
            pytest.fail(f"real-ZFS test cannot run in CI: {problem}")
        pytest.skip(f"needs real ZFS: {problem}")


@pytest.fixture
def make_pool(zfs_ready, tmp_path):
    made = []

    def make(layout, size="256M", ashift=None):
        p = create_pool(tmp_path, layout, size, ashift=ashift)
        made.append(p)
        return p

    yield make
    for p in made:
        p.destroy()
        for d in p.disks:  # the written blocks of a sparse vdev stay on the disk pytest keeps its dirs on:
            d.unlink(missing_ok=True)  # in the lane's guest two streams' leftovers filled its root once


@pytest.fixture
def cfg_file(tmp_path) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(f'state_db = "{tmp_path / "state.db"}"\n')
    return p


def rebal(*args: str, config: Path | None = None, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real command line in a subprocess (exit codes, stderr lines, no tracebacks)."""
    argv = [sys.executable, "-m", "rebal"]
    if config is not None:
        argv += ["--config", str(config)]
    e = dict(os.environ)
    e.pop("REBAL_CONFIG", None)
    e.update(env or {})
    r = subprocess.run(argv + list(args), capture_output=True, text=True, env=e)
    assert "Traceback" not in r.stderr, r.stderr
    if check and r.returncode != 0:
        raise AssertionError(f"rebal {' '.join(args)} exited {r.returncode}: {r.stderr}\nstdout: {r.stdout[-4000:]}")
    return r


def rebal_json(*args: str, config: Path | None = None) -> dict:
    return json.loads(rebal(*args, "--json", config=config).stdout)


@pytest.fixture
def richfs(tmp_path):
    """A fresh tmpfs (xattrs, POSIX ACLs, ns times, holes) mounted for one test."""
    from fsenv import mount_tmpfs, umount

    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the metadata tests need root (to mount a tmpfs) in CI")
        pytest.skip("needs root to mount a tmpfs")
    where = tmp_path / "fs"
    mount_tmpfs(where)
    yield where
    umount(where)


@pytest.fixture(scope="session")
def backup_host(tmp_path_factory, zfs_ready):
    """sshd on 127.0.0.1 with a test key and a pinned host key: the backup host."""
    from sshenv import sshd_problem, start_sshd

    problem = sshd_problem()
    if problem:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(problem)
    host = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield host
    host.stop()


@pytest.fixture
def own_sshd(tmp_path, zfs_ready):
    """An sshd of this test's own on loopback: its authorized_keys may be rewritten (a gated key, a
    key that logs what it is sent), which the session's backup_host must not be."""
    from sshenv import sshd_problem, start_sshd

    problem = sshd_problem()
    if problem:
        pytest.fail(problem)
    host = start_sshd(tmp_path / "sshd")
    yield host
    host.stop()


@pytest.fixture
def monitor():
    """A monitor of dead-man pings on loopback (a real HTTP server, as healthchecks.io takes them):
    (its URL, the (path, body) of each POST it got)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    got: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            n = int(self.headers.get("Content-Length", 0))
            got.append((self.path, self.rfile.read(n).decode()))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/ping/0f1e", got
    srv.shutdown()
    srv.server_close()
