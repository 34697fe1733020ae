"""The ssh master connection ends with rebal, however rebal ends (a real sshd on loopback)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from rebal.transport import OWNER, Endpoint, Ssh, _started

pytestmark = pytest.mark.zfs  # the backup_host fixture: sshd on 127.0.0.1

CHILD = """
import sys
from rebal.transport import Endpoint, Ssh
s = Ssh(Endpoint("127.0.0.1", port={port}, identity_file={key!r}, known_hosts={kh!r}))
s.run(["true"])
print(s._master.pid, s._dir, flush=True)
sys.stdin.read()
"""


def gone(pid: int, start: str, timeout: float = 20) -> bool:
    """Bounded wait for a process to end (a signal is delivered asynchronously)."""
    deadline = time.monotonic() + timeout
    while _started(pid) == start:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def endpoint(host) -> Endpoint:
    return Endpoint(host.host, port=host.port, identity_file=str(host.identity), known_hosts=str(host.known_hosts))


@pytest.fixture
def private_tmp(monkeypatch):
    """A temporary directory of this test's own: another test's rebal, running meanwhile
    (scripts/test.sh runs three at once), would sweep a dead rebal's directory from /tmp before
    this test looks at it. Short (under /tmp, not pytest's tmp_path): the master's socket path
    must fit a unix socket's 108 bytes."""
    private = tempfile.mkdtemp(prefix="rbt-tmp-")
    monkeypatch.setattr(tempfile, "tempdir", private)
    yield private
    shutil.rmtree(private, ignore_errors=True)


def test_a_killed_rebal_leaves_no_master_and_the_next_sweeps_its_directory(backup_host, private_tmp):
    code = CHILD.format(port=backup_host.port, key=str(backup_host.identity), kh=str(backup_host.known_hosts))
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "TMPDIR": private_tmp})
    pid, d = p.stdout.readline().split()
    master = int(pid)
    start = _started(master)
    assert start is not None and os.path.exists(os.path.join(d, "m")), "the master is up"
    p.kill()  # SIGKILL: no handler, no finally
    p.wait()
    assert gone(master, start), "the master outlived the rebal that started it"
    assert os.path.dirname(d) == private_tmp and os.path.isdir(d)  # a SIGKILL cleans nothing up: the next rebal does
    with Ssh(endpoint(backup_host)) as s:
        assert s.run(["echo", "ok"]).stdout.strip() == "ok"
        assert not os.path.exists(d), "the dead rebal's directory was swept"


def test_a_master_left_by_a_dead_rebal_is_ended_at_the_next_start(backup_host):
    """A master without a parent-death signal (setpriv missing, or an older rebal) is found by its
    directory's owner file and ended when the next rebal starts one."""
    d = tempfile.mkdtemp(prefix="rebal-ssh-")
    ep = endpoint(backup_host)
    probe = Ssh(ep, multiplex=False)
    leftover = subprocess.Popen(["ssh", *probe._base(), "-M", "-N", "-o", "ControlPersist=no", "-o",
                                 f"ControlPath={d}/m", "--", ep.host], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dead = subprocess.Popen(["true"])
    dead.wait()
    with open(os.path.join(d, OWNER), "w") as f:
        f.write(f"{dead.pid} 1 {leftover.pid} {_started(leftover.pid)}\n")
    try:
        with Ssh(ep) as s:
            s.run(["true"])
            assert leftover.wait(timeout=20) == -signal.SIGTERM or leftover.returncode is not None
            assert not os.path.exists(d)
    finally:
        if leftover.poll() is None:
            leftover.kill()
            pytest.fail("the leftover master was not ended")
