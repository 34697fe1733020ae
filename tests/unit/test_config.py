import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from conftest import rebal

from rebal import config
from rebal.errors import ConfigError
from rebal.schema import default_of, key_of

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_is_valid_and_documents_every_key():
    cfg = config.load(str(ROOT / "config.example.toml"), check_cron=True)
    assert cfg.replicate == [], "installed as it is, the example runs no job to a host that is not there"
    text = (ROOT / "config.example.toml").read_text()
    live = text.replace("\n#: ", "\n")  # the example job, its mark removed as the file says
    job = config.parse(__import__("tomllib").loads(live), "example", check_cron=True).replicate[0]
    assert job.name == "nightly" and job.recursive is False
    # every key of every model appears in the example with a comment line somewhere above it
    def keys(model, prefix=""):
        for f in fields(model):
            yield key_of(f)

    for model in (config.Config, config.Rebalance, config.Schedule, config.Health, config.Notify,
                  config.Email, config.Webhook, config.Replicate, config.Retention):
        for k in keys(model):
            assert f"{k} =" in text or f"[{k}]" in text or f"[[{k}]]" in text or f".{k}]" in text, (model.__name__, k)


def test_only_state_db_is_valid(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('state_db = "/some/path.db"\n')
    cfg = config.load(str(p), check_cron=True)
    assert cfg.state_db == "/some/path.db" and cfg.pools == [] and cfg.replicate == []
    assert cfg.rebalance.target_spread == 10.0 and cfg.rebalance.reserve_percent == 10.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("bogus = 1\n", "bogus: unknown key"),
        ("[rebalance]\ntarget_spread = \"ten\"\n", "rebalance.target_spread: give a number (no quotes)"),
        ("pools = [\"tank\", \"-o\"]\n", "pools[1]: a pool name starts with a letter"),
        ("[schedule]\nfill = \"61 * * * *\"\n", "schedule.fill: '61 * * * *' is not a valid cron expression"),
        ("[schedule]\nhealth = \"every day\"\n", "schedule.health: 'every day' is not a cron expression of 5 fields"),
        (
            "[[replicate]]\nname='n'\nsource='tank/-x'\ntarget_host='h'\ntarget='b/c'\n",
            "replicate[0].source: a dataset name is pool/path",
        ),
        (
            "[[replicate]]\nname='n'\nsource='tank/x'\ntarget_host='h;rm'\ntarget='b/c'\n",
            "replicate[0].target_host: a host is a DNS name",
        ),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\nexclude=['tank/x/y']\n",
         "replicate[0]: exclude, include and by_property choose among a recursive job's datasets"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\nrecursive=true\nexclude=['tank/x y']\n",
         "replicate[0].exclude[0]: a pattern holds dataset name characters"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\nssh_options=['StrictHostKeyChecking=no']\n",
         "replicate[0].ssh_options[0]: StrictHostKeyChecking is not an ssh option rebal passes on"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\nssh_options=['ProxyCommand=sh -c x']\n",
         "replicate[0].ssh_options[0]: ProxyCommand is not an ssh option"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\nmbuffer_size='lots'\n",
         "replicate[0].mbuffer_size: give a number with an optional K, M, G or T suffix"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\npre_command=[]\n",
         "replicate[0].pre_command"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\ndirection='pull'\n",
         "replicate[0]: a pull job needs source_host"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='/b/c'\nmode='rsync'\ndirection='pull'\nsource_host='fs'\n",
         "rsync pull is not built"),
        ("[[replicate]]\nname='n'\nsource='tank/x'\ntarget='b/c'\ndirection='pull'\nsource_host='fs'\ntarget_host='b'\n",
         "target_host is for push jobs"),
        ("state_db = [\n", "not valid TOML"),
    ],
)
def test_config_check_one_line_naming_key_and_file(tmp_path, text, expected):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    r = rebal("config", "check", str(p), check=False)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"rebal: error: {p}: ")
    assert expected in lines[0]


def test_config_check_ok(tmp_path):
    r = rebal("config", "check", str(ROOT / "config.example.toml"))
    assert "OK" in r.stdout


def test_named_missing_config_is_an_error_default_missing_is_not(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        config.load(str(tmp_path / "nope.toml"))
    env = {"REBAL_CONFIG": str(tmp_path / "nope2.toml")}
    r = rebal("config", "check", check=False, env=env)
    assert r.returncode == 2 and "nope2.toml: no such file" in r.stderr


def test_unreadable_config(tmp_path):
    p = tmp_path / "dir.toml"
    p.mkdir()
    r = rebal("--config", str(p), "status", check=False)
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_every_command_has_help():
    from typer.main import get_command

    from rebal.cli.app import build

    root = get_command(build())

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, path + [name])

    seen = 0
    for path, cmd in walk(root, []):
        assert (cmd.help or "").strip(), f"rebal {' '.join(path)} has no help"
        r = subprocess.run([sys.executable, "-m", "rebal", *path, "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and "Usage:" in r.stdout
        seen += 1
    assert seen >= 4


def test_version():
    from rebal import __version__

    assert rebal("--version").stdout.strip() == f"rebal {__version__}"


def test_config_check_json(tmp_path):
    import json

    p = tmp_path / "bad.toml"
    p.write_text("bogus = 1\n[health]\ncap_warning = 'high'\n")
    r = rebal("config", "check", str(p), "--json", check=False)
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and len(doc["problems"]) == 2
    assert any(x.startswith("bogus:") for x in doc["problems"])


def test_example_values_that_are_not_defaults_say_example():
    """The file's header says every key shows its default unless it says "example": hold it to that
    (the retention_target values once showed last = 3, daily = 30 as if they were defaults)."""
    import re

    models = {"": config.Config, "rebalance": config.Rebalance, "schedule": config.Schedule,
              "health": config.Health, "notify": config.Notify,
              "replicate.retention_source": None, "replicate.retention_target": config.Retention}
    section = ""
    comments: list[str] = []
    import tomllib

    bad = []
    for line in (ROOT / "config.example.toml").read_text().splitlines():
        s = line.strip()
        m = re.match(r"^\[\[?([a-z_.]+)\]\]?", s)
        if m:
            section, comments = m.group(1), []
            continue
        if not s:
            comments = []
            continue
        if s.startswith("#"):
            comments.append(s)
            continue
        kv = re.match(r"^([a-z_]+)\s*=\s*(.+?)\s*(#.*)?$", s)
        if not kv or section not in models:
            continue
        key, raw, inline = kv.group(1), kv.group(2), kv.group(3) or ""
        value = tomllib.loads(f"v = {raw}")["v"]
        if section == "replicate.retention_source":
            default = getattr(config.SOURCE_RETENTION, key)
        else:
            field = next((f for f in fields(models[section]) if key_of(f) == key), None)
            default = None if field is None else default_of(field)
            if default is MISSING or field is None:
                continue
            default = default if not isinstance(default, list) else list(default)
        if value != default and "example" not in (inline + " ".join(comments)).lower():
            bad.append(f"[{section}] {key} = {raw} (default {default!r})")
        comments = []
    assert bad == [], bad


def test_shell_completion_is_offered():
    r = rebal("--help")
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout
    # typer detects the parent shell (shellingham) and then takes --show-completion as a flag, so
    # "bash" would be an extra argument when no shell is an ancestor (a detached job): name it.
    r = rebal("--show-completion", "bash",
              env={"SHELL": "/bin/bash", "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert "_rebal_completion" in r.stdout and "complete " in r.stdout, r.stdout[:300]


def test_config_check_without_a_file_reads_the_defaults_as_every_command_does(tmp_path, monkeypatch):
    """No --config, no $REBAL_CONFIG and no /etc/rebal/config.toml: every command runs on the
    defaults, so `config check` says so and exits 0 (issue 36: it failed)."""
    from typer.testing import CliRunner

    from rebal.cli.app import build

    monkeypatch.delenv("REBAL_CONFIG", raising=False)
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "nope" / "config.toml"))
    r = CliRunner().invoke(build(), ["config", "check"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"no config file at {tmp_path / 'nope' / 'config.toml'}: every key has its default")


def test_an_unknown_key_gets_a_did_you_mean(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[rebalance]\ntarget_spred = 3\n[[replicate]]\nname = \"j\"\nsource = \"tank/a\"\ntarget = \"b/a\"\n"
                 "recursiv = true\n")
    r = rebal("config", "check", str(p), check=False)
    assert r.returncode == 2
    assert "rebalance.target_spred: unknown key (did you mean 'target_spread'?)" in r.stderr, r.stderr
    assert "recursiv: unknown key (did you mean 'recursive'?)" in r.stderr, r.stderr


def test_config_check_fails_what_would_fail_every_scheduled_run(tmp_path):
    """A metrics schedule whose file's directory is missing, a job's key that is not there: valid
    TOML, but the timer's runs would fail every time. config check says so (exit 2), naming the key."""
    p = tmp_path / "c.toml"
    p.write_text(f'metrics_file = "{tmp_path}/no/such/dir/rebal.prom"\n[schedule]\nmetrics = "*/5 * * * *"\n'
                 f'[[replicate]]\nname = "j"\nsource = "tank/a"\ntarget = "b/a"\ntarget_host = "backup"\n'
                 f'identity_file = "{tmp_path}/no-key"\n')
    r = rebal("config", "check", str(p), check=False)
    assert r.returncode == 2, r.stdout
    assert f"metrics_file: {tmp_path}/no/such/dir does not exist" in r.stderr, r.stderr
    # named as the schema names its problems (issue 69 item 9: it said replicate[j] here, replicate[0] there)
    assert f"replicate[0].identity_file: {tmp_path}/no-key does not exist (job j)" in r.stderr, r.stderr
    (tmp_path / "no" / "such" / "dir").mkdir(parents=True)
    (tmp_path / "no-key").write_text("k")
    assert "OK" in rebal("config", "check", str(p)).stdout


def test_help_lists_each_commands_whole_first_sentence():
    from rebal.cli.app import build, first_sentence

    r = rebal("--help")
    text = "".join(r.stdout.split())  # (click wraps lines, at hyphens too)
    for info in build().registered_commands:
        want = first_sentence(info.callback.__doc__)
        assert "".join(want.split()) in text, want
        assert not want.endswith("...")
    assert first_sentence("Do a thing, e.g. this. Then more.") == "Do a thing, e.g. this."


def test_a_retired_key_still_loads_and_is_named_in_the_log(tmp_path, caplog):
    """backup_check_every is gone (every run asks the backup for its bases): a config written for an
    older rebal loads, and the log says the key is ignored and why; a misspelt key is still refused."""
    p = tmp_path / "c.toml"
    job = ('[[replicate]]\nname = "n"\nsource = "tank/a"\ntarget = "bk/a"\ntarget_host = "b"\n')
    p.write_text(job + "backup_check_every = 600\n")
    with caplog.at_level("WARNING", logger="rebal.schema"):
        cfg = config.load(str(p))
    assert cfg.replicate[0].name == "n" and not hasattr(cfg.replicate[0], "backup_check_every")
    assert "replicate[0].backup_check_every: no longer used, ignored" in caplog.text, caplog.text
    p.write_text(job + "backup_check_evry = 600\n")
    with pytest.raises(ConfigError, match="unknown key"):
        config.load(str(p))
