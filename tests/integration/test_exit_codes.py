"""Every command against a missing pool, dataset, job and snapshot, held to the README's table of
exit codes: 2 bad input or a refusal, 5 no such pool. One line on stderr, never a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import rebal, rebal_json
from zfsenv import sh

pytestmark = pytest.mark.zfs
ROOT = Path(__file__).resolve().parents[2]


def readme_codes() -> dict[int, str]:
    """The README's table: exit code -> what it means."""
    line = next(ln for ln in (ROOT / "README.md").read_text().split("\n\n") if ln.startswith("Exit codes:"))
    return {int(n): what for n, what in re.findall(r"(\d+) ([^;]+)", line.split("`rebal health`")[0])}


def test_the_readme_table_has_the_codes_tested_here():
    codes = readme_codes()
    assert "bad input" in codes[2] and "no such pool" in codes[5] and "ZFS tools missing" in codes[3]


@pytest.fixture
def setup(make_pool, tmp_path):
    pool = make_pool([[]], size="128M")
    sh("zfs", "create", f"{pool.name}/data")
    (Path(pool.mountpoint) / "data" / "f").write_bytes(b"x" * 1000)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "j"\n'
                   f'source = "{pool.name}/data"\ntarget = "{pool.name}/copy"\n')
    assert rebal_json("replicate", "j", config=cfg)["outcome"] == "ok"
    return pool, cfg


def cases(p: str, tmp: str) -> list[tuple[list[str], int, str]]:
    nopool = "rebalnosuchpool"
    return [
        # no such pool: 5
        (["status", nopool], 5, "no such pool"),
        (["history", nopool], 5, "no such pool"),
        (["plan", f"{nopool}/data"], 5, "no such pool"),
        (["rebalance", f"{nopool}/data", "--dry-run"], 5, "no such pool"),
        (["scrub", nopool], 5, "no such pool"),
        (["heal", nopool], 5, "no such pool"),  # issue 69: it said "no job backs it up", exit 2
        # no such dataset or path: bad input, 2
        (["plan", f"{p}/nods"], 2, "no such dataset"),
        (["rebalance", f"{p}/nods", "--dry-run"], 2, "no such dataset"),
        (["where", f"{tmp}/nothing-here"], 2, "No such file"),
        (["refresh", f"{tmp}/nothing-here", "--plan"], 2, "No such file"),
        # --to special where there is no special vdev (zfs-fuse has no allocation classes), or --to else
        (["plan", f"{p}/data", "--to", "special"], 2, "has no special vdev"),
        (["rebalance", f"{p}/data", "--to", "special", "--dry-run"], 2, "has no special vdev"),
        (["plan", f"{p}/data", "--to", "fast"], 2, "--to fast"),
        (["prune", f"{p}/nods", "--job", "j"], 2, "nods"),
        (["prune", f"{nopool}/copy", "--job", "j"], 5, "no such pool"),
        # no such job: 2
        (["replicate", "nope"], 2, "no replication job named 'nope'"),
        (["backups", "nope"], 2, "no replication job named 'nope'"),
        (["verify", "nope"], 2, "no replication job named 'nope'"),
        (["restore", "nope", "--to", f"{p}/x"], 2, "no replication job named 'nope'"),
        (["run", "nope"], 2, "nope"),
        (["runs", "--job", "nope"], 2, "no such job"),
        (["runs", "--kind", "bogus"], 2, "no such kind of run"),
        # no such snapshot: 2
        (["restore", "j", "--at", "nosnap", "--to", f"{p}/x"], 2, "no restore point @nosnap"),
        (["restore", "j", "--path", "nofile", "--to", tmp], 2, "nofile"),
    ]


def test_every_command_against_what_is_not_there(setup, tmp_path):
    pool, cfg = setup
    wrong = []
    for argv, code, text in cases(pool.name, str(tmp_path)):
        r = rebal(*argv, config=cfg, check=False)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        if r.returncode != code or text not in r.stderr or len(lines) != 1:
            wrong.append(f"rebal {' '.join(argv)}: exit {r.returncode} (want {code}), stderr {r.stderr.strip()!r}")
    assert not wrong, "\n".join(wrong)


def test_h_is_help():
    """Issue 69 (9): `-h` was an unknown option; it is --help, for rebal and each command."""
    for argv in (["-h"], ["replicate", "-h"], ["config", "-h"]):
        r = rebal(*argv, check=False)
        assert r.returncode == 0 and r.stdout.startswith("Usage: rebal"), (argv, r.returncode, r.stderr)
    # config's one command is listed whole, not cut with "..." (issue 69 item 9)
    assert "naming its key." in rebal("config", "--help", env={"COLUMNS": "80"}).stdout.split("Commands:")[1]


def test_a_restore_refused_here_is_said_before_the_backup_host_is_reached(tmp_path):
    """Issue 69 (7): `restore --path X --to DIR` said DIR/X exists only after seconds spent on the backup
    host, and bad input was recorded as a failed run. Both are said first now: the job's backup host
    here is a closed port, so reaching it would fail otherwise (exit 3), and no run is recorded."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "far"\nsource = "tank/x"\n'
                   'target = "bk/x"\ntarget_host = "127.0.0.1"\ntarget_port = 1\n')
    (tmp_path / "report.odt").write_text("mine")
    r = rebal("restore", "far", "--path", "home/report.odt", "--to", str(tmp_path), config=cfg, check=False)
    assert r.returncode == 2 and "report.odt exists: not overwritten" in r.stderr, (r.returncode, r.stderr)
    r = rebal("restore", "far", "--all", "--path", "x", "--to", "tank/y", config=cfg, check=False)
    assert r.returncode == 2 and "--all restores every dataset" in r.stderr, (r.returncode, r.stderr)
    r = rebal("restore", "far", "--to", "bad name", config=cfg, check=False)
    assert r.returncode == 2 and "bad dataset name" in r.stderr, (r.returncode, r.stderr)
    r = rebal("heal", "rebalnosuchpool", config=cfg, check=False)
    assert r.returncode == 5 and "no such pool" in r.stderr, (r.returncode, r.stderr)
    cfg.write_text(cfg.read_text().replace('source = "tank/x"', 'source = "rebalnosuchpool/x"'))
    r = rebal("heal", "rebalnosuchpool", "--job", "far", config=cfg, check=False)
    assert r.returncode == 5 and "no such pool" in r.stderr, (r.returncode, r.stderr)
    runs = json.loads(rebal("runs", "--json", config=cfg).stdout)["runs"]
    assert runs == [], runs  # bad input is no failed run (issue 69 item 9)
    assert (tmp_path / "report.odt").read_text() == "mine"
