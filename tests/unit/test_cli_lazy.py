"""A run of one command imports the module of that command alone (app.MODULE_OF); the table must say
where every command the modules register lives, or a command would be missing from its own start."""

import subprocess
import sys

import pytest

from rebal.cli.app import COMMAND_MODULES, MODULE_OF, app, build, command_of


def registered() -> dict[str, str]:
    """Each command (and command group) the modules register -> the module that registers it."""
    build()
    out = {}
    for info in app.registered_commands:
        out[info.name or info.callback.__name__.replace("_", "-")] = info.callback.__module__.rsplit(".", 1)[1]
    for group in app.registered_groups:  # `rebal config ...`: its commands come from config_cmd
        mods = {i.callback.__module__.rsplit(".", 1)[1] for i in group.typer_instance.registered_commands}
        assert len(mods) == 1, mods
        out[group.name] = mods.pop()
    return out


def test_the_table_names_the_module_of_every_command():
    assert registered() == MODULE_OF
    assert set(MODULE_OF.values()) == set(COMMAND_MODULES)


@pytest.mark.parametrize("argv, cmd", [
    (["replicate", "night", "--json"], "replicate"),
    (["--config", "x.toml", "--debug", "status"], "status"),
    (["-c", "replicate", "backups"], "backups"),  # a value that looks like a command is the config's
    (["--config=x.toml", "config", "check"], "config"),
    (["--help"], None), (["--version"], None), ([], None), (["--debug", "-h"], None),
])
def test_the_command_is_found_after_the_global_options(argv, cmd):
    assert command_of(argv) == cmd


def test_a_command_runs_with_only_its_module_and_the_help_lists_every_command():
    code = ("import sys; from rebal.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('rebal.cli.') and m.endswith('_cmd')))")
    one = subprocess.run([sys.executable, "-c", code, "--config", "/nonexistent.toml", "keys", "--help"],
                         capture_output=True, text=True)
    assert one.stdout.strip().splitlines()[-1] == "['replicate_cmd']", one.stdout + one.stderr
    assert "Usage: rebal keys" in one.stdout
    whole = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True)
    assert whole.stdout.strip().splitlines()[-1] == str(sorted(COMMAND_MODULES)), whole.stdout
    for name in MODULE_OF:
        assert f" {name} " in whole.stdout or f" {name}\n" in whole.stdout, name
    typo = subprocess.run([sys.executable, "-c", code, "replicat"], capture_output=True, text=True)
    assert "No such command" in typo.stderr and "replicate" in typo.stderr, typo.stderr
