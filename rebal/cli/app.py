"""The typer app, the global options, logging set-up and `main`. The CLI is the only layer that
prints or exits; the command modules beside this one parse, call a service and write what a view in
`rebal.views` returns. Each command module registers its commands on `app` when imported (`main`
imports them all, in the order --help lists them)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Optional

import typer

from .. import __version__
from .io import OPTS, guarded

app = typer.Typer(
    help="Keep a ZFS pool's data evenly spread over its vdevs, and safely copied to a backup host.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # -h as every admin types it
)
config_app = typer.Typer(help="Check the configuration file.", no_args_is_help=True, rich_markup_mode=None,
                         context_settings={"help_option_names": ["-h", "--help"]})
app.add_typer(config_app, name="config")

log = logging.getLogger(__name__)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def _version(value: bool) -> None:
    if value:
        print(f"rebal {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    config: Annotated[
        Optional[str],
        typer.Option("--config", "-c", metavar="FILE", help="Config file [default: $REBAL_CONFIG or /etc/rebal/config.toml]."),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Log every command run; show tracebacks.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    OPTS.config = config
    OPTS.debug = debug
    logging.getLogger().setLevel(logging.DEBUG if debug else logging.WARNING)


def log_for_service() -> None:
    """Lines journald reads well: LEVEL logger: message (journald adds the time)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(h)
    root.setLevel(logging.DEBUG if OPTS.debug else logging.INFO)


COMMAND_MODULES = ("status_cmd", "rebalance_cmd", "refresh_cmd", "replicate_cmd", "rebuild_cmd", "failover_cmd", "service_cmd", "config_cmd",
                   "gate_cmd")


# which module registers each command (tests/unit/test_cli_lazy.py holds it to what they register)
MODULE_OF = {
    "status": "status_cmd", "history": "status_cmd", "where": "status_cmd",
    "plan": "rebalance_cmd", "rebalance": "rebalance_cmd", "runs": "rebalance_cmd",
    "refresh": "refresh_cmd",
    "replicate": "replicate_cmd", "backups": "replicate_cmd", "restore": "replicate_cmd", "verify": "replicate_cmd",
    "heal": "replicate_cmd", "keys": "replicate_cmd",
    "rebuild": "rebuild_cmd",
    "failover": "failover_cmd", "failback": "failover_cmd",
    "daemon": "service_cmd", "health": "service_cmd", "metrics": "service_cmd", "notify": "service_cmd",
    "run": "service_cmd", "scrub": "service_cmd", "watch": "service_cmd",
    "config": "config_cmd", "units": "config_cmd",
    "gate": "gate_cmd", "prune": "gate_cmd",
}
VALUED = ("--config", "-c")  # the global options that take a value


def command_of(argv: list[str]) -> str | None:
    """The command an argument list names (after the global options), or None: none, or help,
    --version or completion asked of the whole app."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in VALUED:
            i += 2
        elif a.startswith("--config=") or a == "--debug":
            i += 1
        elif a.startswith("-"):
            return None
        else:
            return a
    return None


def build(argv: list[str] | None = None) -> typer.Typer:
    """The app with its commands registered (each command module registers its own on import):
    where ``argv`` (the arguments) names a known command, only that command's module (a scheduled run does not build
    every other command's options: about a second of a start under emulation); else all of them,
    for the whole app's help and for a command it does not know."""
    import importlib

    cmd = None if argv is None else command_of(argv)
    for m in ((MODULE_OF[cmd],) if cmd in MODULE_OF else COMMAND_MODULES):
        importlib.import_module(f"{__package__}.{m}")
    for info in app.registered_commands:  # --help lists each command with its whole first sentence
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            info.short_help = first_sentence(info.callback.__doc__)
    return app


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring, on one line (click would cut it at 45 characters)."""
    text = " ".join(doc.split("\n\n", 1)[0].split())
    for i, ch in enumerate(text):
        if ch == "." and (i + 1 == len(text) or text[i + 1] == " ") and not text[max(0, i - 3):i].endswith(("e.g", "i.e")):
            return text[:i + 1]
    return text


def main(argv: list[str] | None = None) -> None:
    """Entry point: logging set up once, then the app; a RebalError becomes one line on stderr and
    its exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    cli = build(sys.argv[1:] if argv is None else argv)
    guarded(lambda: cli(args=argv, prog_name="rebal", standalone_mode=True))
