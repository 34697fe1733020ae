"""The shipped rebal-watch.service under the guest's real systemd (issue 68): the unit as shipped,
its confinement untouched, with a drop-in naming the test's keys file, gate log and config. It reads
the backups under the gated root, writes its state, and fails the unit on a finding (exit 1), for
OnFailure= or a monitor to see; with nothing wrong it exits 0."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from zfsenv import create_pool, sh

pytestmark = [pytest.mark.openzfs, pytest.mark.lane_long]  # a unit under systemd, as the confined ones: the full lane

REPO = Path(__file__).resolve().parents[2]
UNIT = "rebal-watch.service"
KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTestOnlyNotUsedToConnect0000"


def test_the_watch_unit_runs_confined_and_fails_on_a_finding(zfs_ready):
    if not Path("/run/systemd/system").is_dir():
        pytest.fail("the guest does not run systemd as PID 1")
    assert Path("/usr/local/bin/rebal").exists(), "the unit runs /usr/local/bin/rebal (README: Install)"
    base = Path(f"/srv/rbwatch{os.getpid()}")  # (the unit's PrivateTmp hides /tmp and /var/tmp)
    base.mkdir(parents=True)
    unit, dropin = Path("/run/systemd/system") / UNIT, Path("/run/systemd/system") / f"{UNIT}.d"
    pool = None
    state = Path(f"/var/lib/rebal/lane-watch-{os.getpid()}.db")
    try:
        pool = create_pool(base, [[]], size="256M")
        for ds in ("fs1", "fs1/home", "fs1/new"):
            sh("zfs", "create", f"{pool.name}/{ds}")
        sh("zfs", "snapshot", f"{pool.name}/fs1/home@rebal-nightly-20261206T010000Z")
        (base / "authorized_keys").write_text(
            f'command="rebal gate --receive-into {pool.name}/fs1",restrict ssh-ed25519 {KEY} rebal@fs1\n')
        (base / "gate.log").write_text("")
        (base / "config.toml").write_text(f'state_db = "{state}"\n')
        shutil.copy(REPO / "systemd" / UNIT, unit)
        dropin.mkdir(exist_ok=True)

        def start(extra: str) -> tuple[int, dict]:
            (dropin / "test.conf").write_text(
                "[Service]\nExecStart=\nExecStart=/usr/local/bin/rebal --config " + str(base / "config.toml") +
                f" watch --authorized-keys {base / 'authorized_keys'} --gate-log {base / 'gate.log'} --json{extra}\n"
                f"StandardOutput=truncate:{base / 'out.json'}\nStandardError=truncate:{base / 'err.txt'}\n")
            sh("systemctl", "daemon-reload")
            sh("systemctl", "start", UNIT, check=False)
            code = int(sh("systemctl", "show", "-p", "ExecMainStatus", "--value", UNIT).stdout.strip() or -1)
            sh("systemctl", "reset-failed", UNIT, check=False)
            err = (base / "err.txt").read_text()
            assert "Traceback" not in err and "Operation not permitted" not in err, err
            return code, json.loads((base / "out.json").read_text())

        code, out = start("")  # fs1/new holds no snapshot: a warning, the unit fails
        assert code == 1 and out["level"] == "WARNING", out
        assert [r["root"] for r in out["roots"]] == [f"{pool.name}/fs1"]
        assert any(f"{pool.name}/fs1/new" in f["message"] for f in out["findings"]), out["findings"]
        assert state.exists()  # the time of the last watch, written through ReadWritePaths
        sh("zfs", "snapshot", f"{pool.name}/fs1/new@rebal-nightly-20261206T010000Z")
        sh("zpool", "scrub", pool.name)  # (a pool never scrubbed is a warning of its own)
        sh("zpool", "wait", "-t", "scrub", pool.name)
        code, out = start(" --max-age-hours 1000000")
        assert code == 0 and out["level"] == "OK", out
    finally:
        unit.unlink(missing_ok=True)
        shutil.rmtree(dropin, ignore_errors=True)
        sh("systemctl", "daemon-reload", check=False)
        if pool is not None:
            pool.destroy()
        state.unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)
