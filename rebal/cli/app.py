"""The typer app, the global options, and the helpers every command module shares. The CLI is the
only layer that prints or exits; the command modules beside this one parse, call a service and
write what a view in `rebal.views` returns."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Optional


def _import_typer():
    """typer before 0.16 (Debian 13 ships 0.15) imports rich, markdown-it and pygments when it loads,
    only to format help and errors in colour, which rebal turns off below (rich_markup_mode=None,
    pretty_exceptions_enable=False). In the lane's OpenZFS guest that was 0.9 s of every command's
    start (issue 19). rich stays hidden while typer loads; rebal's progress bars import it later."""
    if "rich" in sys.modules:
        import typer
        return typer
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        import typer
    finally:
        if sys.modules.get("rich", 0) is None:
            del sys.modules["rich"]
    return typer


typer = _import_typer()
from .. import __version__
from .io import OPTS, Options, Signals, choice, guarded, load_config, open_state, out_json, out_text, say_error, state_or_none, warn  # noqa: F401

app = typer.Typer(
    help="Keep a ZFS pool's data evenly spread over its vdevs, and safely copied to a backup host.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
config_app = typer.Typer(help="Check the configuration file.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(config_app, name="config")

log = logging.getLogger("rebal")


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
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def log_for_service() -> None:
    """Lines journald reads well: LEVEL logger: message (journald adds the time)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(h)
    root.setLevel(logging.DEBUG if OPTS.debug else logging.INFO)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; turn RebalError into one line on stderr and its exit code."""
    from . import commands

    commands.load(sys.argv[1:] if argv is None else list(argv))  # registers what this command line needs

    guarded(lambda: app(args=argv, prog_name="rebal", standalone_mode=True))
