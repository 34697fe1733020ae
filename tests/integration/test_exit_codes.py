"""Every command against a missing pool, dataset, job and snapshot, held to the README's table of
exit codes: 2 bad input or a refusal, 5 no such pool. One line on stderr, never a traceback."""

from __future__ import annotations

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
