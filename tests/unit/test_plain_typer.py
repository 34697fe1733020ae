"""rebal/cli/plain_typer.py: typer imported with rich hidden, and rich usable afterwards (the progress
bars need it). The lane's test_the_command_starts_without_typers_rich_help shows the saving on
Debian 13's typer, which imports rich's help formatter eagerly."""

import subprocess
import sys

PROBE = """
import sys
from rebal.cli.plain_typer import import_typer
import_typer()
assert "typer" in sys.modules, "typer not imported"
assert "rich" not in sys.modules, "rich was imported with typer"
import rich.progress  # the progress bars' import still works after
from rebal.cli import main
sys.argv = ["rebal", "--version"]
main()
"""


def test_typer_is_imported_without_rich_and_rich_loads_after():
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("rebal "), r.stdout


def test_nothing_is_hidden_when_typer_came_first():
    r = subprocess.run([sys.executable, "-c", "import sys, typer, rich\nfrom rebal.cli.plain_typer import import_typer\n"
                        "import_typer()\nassert sys.modules['rich'] is not None"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
