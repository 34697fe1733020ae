"""`rebal rebalance` parsed without typer (rebal/cli/fast.py) gives `rebalance_run.run` the very
keywords typer gives it, and leaves every command line it does not fully understand to typer."""

import pytest
from typer.testing import CliRunner

from rebal.cli import commands, fast, rebalance_run
from rebal.cli.app import app

commands.load(None)

ALL_DEFAULTS = dict(target_spread=None, max_bytes=None, until=None, max_rate=None, verify=None, method=None,
                    jobs=None, exclude=None, min_age=None, min_size=None, max_size=None, allow_snapshots=False,
                    max_growth=None, hardlinks=False, rewrite_all=False, placement="auto", dry_run=False,
                    as_json=False)


def through_typer(monkeypatch, argv: list[str]) -> tuple[list[str], dict]:
    got = {}

    def run(targets, **kw):
        got["call"] = (list(targets), kw)
        return 0

    monkeypatch.setattr(rebalance_run, "run", run)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, (argv, r.output)
    return got["call"]


GOOD = [
    ["rebalance", "tank/data"],
    ["--config", "c.toml", "rebalance", "/tank/a", "/tank/b", "--all", "--json"],
    ["-c", "c.toml", "rebalance", "--method", "rewrite", "tank/x", "--placement=model"],
    ["--config=c.toml", "rebalance", "tank", "--target-spread", "2.5", "--jobs", "3", "--min-age", "7"],
    ["rebalance", "tank", "--exclude", "*.tmp", "--exclude=cache/*", "--max-bytes", "500G", "--max-rate", "20M"],
    ["rebalance", "tank", "--until", "06:30", "--verify", "size", "--min-size", "1M", "--max-size", "10G",
     "--allow-snapshots", "--max-growth", "5G", "--hardlinks", "--dry-run"],
    ["rebalance", "tank", "--jobs", "2", "--jobs", "4", "--method", "copy", "--method=auto"],  # the last one wins
    ["rebalance", "tank", "--target-spread", "1e1", "--verify", "bogus"],  # bad choices are the body's to refuse
]


@pytest.mark.parametrize("argv", GOOD)
def test_the_fast_parse_gives_run_what_typer_gives_it(monkeypatch, argv):
    config, targets, kw = fast.parse_rebalance(argv)
    t_targets, t_kw = through_typer(monkeypatch, argv)
    assert targets == t_targets
    assert ALL_DEFAULTS | kw == t_kw
    assert config == (argv[1] if argv[0] in ("--config", "-c") else
                      argv[0].split("=", 1)[1] if argv[0].startswith("--config=") else None)


def test_the_table_knows_every_option_of_the_typer_command():
    import typer.main

    cmd = typer.main.get_command(app).commands["rebalance"]
    declared = {}
    for p in cmd.params:
        for opt in p.opts:
            if opt.startswith("--"):
                declared[opt] = p.name
    assert set(declared) == set(fast.REBALANCE)
    assert {k: v[0] for k, v in fast.REBALANCE.items()} == declared
    for opt, (_key, kind) in fast.REBALANCE.items():
        p = next(p for p in cmd.params if opt in p.opts)
        assert (kind is None) == p.is_flag, opt
        assert (kind is list) == p.multiple, opt


@pytest.mark.parametrize("argv", [
    ["rebalance"], ["rebalance", "--help"], ["rebalance", "-h", "tank"], ["rebalance", "tank", "--jobs"],
    ["rebalance", "tank", "--jobs", "two"], ["rebalance", "tank", "--target-spread", "x"],
    ["rebalance", "tank", "--all=yes"], ["rebalance", "tank", "--method", "--all"], ["rebalance", "--", "tank"],
    ["rebalance", "tank", "--no-such-option"], ["rebalance", "tank", "--exclude="], ["rebalance", ""],
    ["--debug", "rebalance", "tank"], ["--version"], [], ["plan", "tank"], ["--config"], ["--config", "rebalance"],
    ["status", "rebalance"],
])
def test_anything_else_is_left_to_typer(argv):
    assert fast.parse_rebalance(argv) is None


def test_status_lines_still_parse_and_rebalance_lines_are_not_status():
    assert fast.parse(["-c", "c.toml", "status", "--json", "p"]) == ("c.toml", ["p"], True)
    assert fast.parse(["rebalance", "status"]) is None
