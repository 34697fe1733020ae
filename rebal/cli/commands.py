"""The command modules. Each registers its commands on the app when imported, in this order in
--help. A command line naming one command loads only the module that has it: typer builds a click
command for every registered command at each start, and for all of them that was 0.38 s against
0.12 s for one module in the lane's OpenZFS guest (issue 19). Help, --version, completion and
anything not recognised load them all."""

from __future__ import annotations

import importlib
import os

MODULES = ("status_cmd", "rebalance_cmd", "replicate_cmd", "service_cmd", "config_cmd", "gate_cmd")
# every top-level command and the module that registers it (a test holds this to the app)
OWNER = {
    "status": "status_cmd", "history": "status_cmd", "where": "status_cmd",
    "plan": "rebalance_cmd", "rebalance": "rebalance_cmd", "runs": "rebalance_cmd",
    "replicate": "replicate_cmd", "backups": "replicate_cmd", "restore": "replicate_cmd", "verify": "replicate_cmd",
    "health": "service_cmd", "notify": "service_cmd", "metrics": "service_cmd", "scrub": "service_cmd",
    "run": "service_cmd", "daemon": "service_cmd",
    "config": "config_cmd", "units": "config_cmd", "gate": "gate_cmd", "prune": "gate_cmd",
}


def command_name(argv: list[str]) -> str | None:
    """The command a command line names, past the global options; None when it names none (help,
    --version, an unknown option)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--config", "-c"):
            i += 2
        elif a.startswith("--config=") or a == "--debug":
            i += 1
        elif a.startswith("-"):
            return None
        else:
            return a
    return None


def load(argv: list[str] | None = None) -> None:
    """Register the commands ``argv`` needs (all of them when ``argv`` is None)."""
    completing = any(k.startswith("_REBAL_COMPLETE") for k in os.environ)
    name = None if argv is None or completing else command_name(argv)
    for m in [OWNER[name]] if name in OWNER else MODULES:
        importlib.import_module(f"{__package__}.{m}")
