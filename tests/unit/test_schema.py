"""The config's checks (rebal/schema.py): what pydantic's strict mode refused before is refused still,
every problem named by its key path, all of them at once."""

import re
import subprocess
import sys

import pytest

from rebal import config
from rebal.errors import ConfigError


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as e:
        config.parse(data, "c.toml")
    return e.value.problems


@pytest.mark.parametrize("data, expected", [
    ({"rebalance": {"jobs": True}}, "rebalance.jobs: give a whole number"),
    ({"rebalance": {"jobs": 2.0}}, "rebalance.jobs: give a whole number"),
    ({"rebalance": {"jobs": 65}}, "rebalance.jobs: give a number less than or equal to 64"),
    ({"rebalance": {"target_spread": 0}}, "rebalance.target_spread: give a number greater than 0"),
    ({"rebalance": {"allow_snapshots": "yes"}}, "rebalance.allow_snapshots: give true or false"),
    ({"rebalance": {"verify": "md5"}}, 'rebalance.verify: give one of "hash", "size", "none"'),
    ({"rebalance": {"exclude": "*.tmp"}}, "rebalance.exclude: give a list"),
    ({"rebalance": {"exclude": ["a", 3]}}, "rebalance.exclude[1]: give text in quotes"),
    ({"rebalance": {"max_growth": "lots"}}, "rebalance.max_growth: give a number with an optional K, M, G or T suffix"),
    ({"rebalance": {"max_rate": "fast please"}}, "rebalance.max_rate: give a number with an optional K, M, G or T suffix"),
    ({"replicate": [{"name": "n", "source": "t/x", "target_host": "h", "target": "b/c", "bwlimit": "50 per second"}]},
     "replicate[0].bwlimit: give a number"),
    ({"rebalance": "fast"}, "rebalance: give a table of keys"),
    ({"schedule": {"rebalance_end": "25:00"}}, "schedule.rebalance_end: give a time of day as HH:MM"),
    ({"notify": {"email": {"host": "mail", "to": ["a@b"]}}}, "notify.email.from: required key is missing"),
    ({"notify": {"email": {"host": "mail", "from": "r@h", "to": []}}}, "notify.email.to: give at least 1 item"),
    ({"notify": {"webhook": {"url": "ftp://x"}}}, "notify.webhook.url: give an http:// or https:// address"),
    ({"notify": {"sms": {}}}, "notify.sms: unknown key"),
    ({"replicate": [{"name": "n", "source": "t/x", "target_host": "h", "target": "b/c", "retention_target": {"yearly": 1}}]},
     "replicate[0].retention_target.yearly: unknown key"),
    ({"replicate": [{"name": "n", "source": "t/x", "target_host": "h", "target": "b/c"}] * 2},
     "replicate: two jobs are named 'n'"),
    ({"replicate": [{"name": "n", "source": "t/x", "target_host": "h", "target": "/b", "mode": "rsync",
                     "target_port": 0}]}, "replicate[0].target_port: give a number greater than 0"),
    ({"replicate": [{"name": "n", "source": "t/x", "target_host": "h", "target": "b/-x"}]},
     "replicate[0].target: "),
    ({"schedule": {"rebalance_after": "nope"}}, "(top level): schedule.rebalance_after names 'nope'"),
])
def test_refused_with_its_key_path(data, expected):
    found = problems(data)
    assert any(p.startswith(expected) for p in found), found


def test_every_problem_at_once_and_nothing_else():
    found = problems({"bogus": 1, "health": {"cap_warning": "high", "cap_critical": 95}, "pools": ["ok", "-o"]})
    assert len(found) == 3, found
    assert sorted(p.split(":")[0] for p in found) == ["bogus", "health.cap_warning", "pools[1]"]


def test_valid_values_land_typed():
    cfg = config.parse({"rebalance": {"target_spread": 5, "jobs": 3, "exclude": ["*.iso"]},
                        "notify": {"email": {"host": "mail.example", "from": "r@h", "to": ["a@b"]}},
                        "replicate": [{"name": "n", "source": "t/x", "target_host": "h", "target": "b/c",
                                       "retention_target": {"daily": 30}}]}, "c.toml")
    assert cfg.rebalance.target_spread == 5.0 and isinstance(cfg.rebalance.target_spread, float)
    assert cfg.rebalance.jobs == 3 and cfg.rebalance.exclude == ["*.iso"]
    assert cfg.notify.email.sender == "r@h" and cfg.notify.email.port == 587
    job = cfg.job("n")
    assert job.retention_target.daily == 30 and job.retention_target.hourly == 24
    assert job.retention_source == config.SOURCE_RETENTION and job.retention_source is not config.SOURCE_RETENTION
    assert job.remote_host == "h"
    # defaults are not shared between instances
    assert config.Config().rebalance is not config.Config().rebalance


def test_cron_checked_only_when_asked():
    assert config.parse({"schedule": {"fill": "61 * * * *"}}, "c", check_cron=False).schedule.fill == "61 * * * *"
    assert any("not a valid cron expression" in p for p in problems({"schedule": {"fill": "61 * * * *"}}))


def test_commands_start_without_pydantic(tmp_path):
    """The point of schema.py: no command pays pydantic's import (issue 19: 1.4 s of a start in the guest)."""
    code = ("import sys; from rebal import config; config.load(sys.argv[1]); import rebal.cli.app; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'rich')))")
    p = tmp_path / "c.toml"
    p.write_text('[rebalance]\ntarget_spread = 5\n')
    r = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout


def test_one_size_grammar_for_the_command_line_and_the_file():
    """What `--max-rate 1.5M` takes, `max_rate = "1.5M"` and `bwlimit = "1.5M"` take too, and what
    one refuses the other refuses (issue 36: two grammars, and "fast please" passed the check)."""
    from rebal.errors import UsageError
    from rebal.units import parse_size

    for text in ("1.5M", "200MiB", "4096", "10G", "1t", "512k", "fast please", "1,5M", "-1M", "M", ""):
        try:
            parse_size(text)
            cli_ok = True
        except UsageError:
            cli_ok = False
        job = {"name": "n", "source": "t/x", "target_host": "h", "target": "b/c", "bwlimit": text}
        try:
            config.parse({"rebalance": {"max_rate": text, "max_growth": text}, "replicate": [job]}, "c.toml")
            file_ok = True
        except ConfigError:
            file_ok = False
        assert cli_ok == file_ok, text


def test_min_size_over_max_size_is_refused():
    import pytest

    from rebal.errors import UsageError
    from rebal.rebalance.options import options_from

    with pytest.raises(UsageError, match="--min-size 10M is more than --max-size 1M"):
        options_from(config.parse({}, "c.toml"), ["tank/a"], min_size="10M", max_size="1M")
    assert options_from(config.parse({}, "c.toml"), ["tank/a"], min_size="1M", max_size="10M").filters.max_size == 10 << 20


def test_each_option_of_plan_and_rebalance_reaches_the_planner_or_is_the_commands_own():
    """The planner's options are declared once (options_from's keywords): a command passes those of
    its parameters by name. One it declares that is neither the planner's nor used by the command
    itself would be dropped silently: this fails on it."""
    import inspect

    from rebal.cli.rebalance_cmd import plan, rebalance
    from rebal.rebalance.options import PLANNER_OPTIONS

    assert {"target_spread", "exclude", "max_bytes", "method", "placement"} <= PLANNER_OPTIONS
    for command in (plan, rebalance):
        body = inspect.getsource(command).split('"""', 2)[-1]  # after the signature and docstring
        for name in inspect.signature(command).parameters:
            if name not in PLANNER_OPTIONS | {"ctx", "targets"}:  # targets: options_from's first argument
                assert re.search(rf"\b{name}\b", body), f"{command.__name__}: --{name.replace('_', '-')} goes nowhere"
    assert PLANNER_OPTIONS - {"listing"} <= set(inspect.signature(rebalance).parameters) | set(inspect.signature(plan).parameters)
