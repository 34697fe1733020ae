"""rebal config check."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import JsonOpt, app, config_app
from .io import OPTS, load_config, out_json, out_text


@config_app.command("check", short_help="Validate a config file: one line per problem, naming its key.")
def config_check(
    file: Annotated[Optional[str], typer.Argument(help="File to check [default: the --config file].")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a config file: one line per problem, naming the key and the file; exit 2 if any."""
    import os

    from .. import config
    from ..errors import ConfigError

    path, named = (file, True) if file else config.config_path(OPTS.config)
    if not named and not os.path.exists(path):  # as every other command reads it: all defaults
        cfg = config.Config()
        zfs_lines, zfs_json = _zfs_here()
        if as_json:
            out_json({"file": None, "ok": True, "problems": [], "jobs": [], "state_db": cfg.state_db, "zfs": zfs_json})
        else:
            out_text(f"no config file at {path}: every key has its default (state database {cfg.state_db})\n"
                     + "".join(line + "\n" for line in zfs_lines))
        return
    try:
        cfg = config.load(path, check_cron=True)
    except ConfigError as e:
        if as_json:
            out_json({"file": path, "ok": False, "problems": e.problems})
        raise
    here = config.here_problems(cfg)
    zfs_lines, zfs_json = _zfs_here()
    if as_json:
        out_json({"file": path, "ok": not here, "problems": here, "jobs": [j.name for j in cfg.replicate],
                  "state_db": cfg.state_db, "zfs": zfs_json})
    if here:
        raise ConfigError(path, here)
    if not as_json:
        out_text(f"{path}: OK ({len(cfg.replicate)} replication job(s), state database {cfg.state_db})\n"
                 + "".join(line + "\n" for line in zfs_lines))


def _zfs_here() -> tuple[list[str], dict]:
    """What this host's zfs has of what rebal uses, and what rebal does without the rest."""
    import shutil

    from ..zfs import features as feat
    from ..zfs.host import ZfsHost

    if shutil.which("zfs") is None:
        return ([f"zfs on this host: not installed (rebal needs OpenZFS {'.'.join(map(str, feat.MINIMUM))}+: "
                 "zfsutils-linux)"], {"installed": False})
    host = ZfsHost.here()
    version = host.version()
    found = feat.features(version, host.abilities(), host.rewrite_support())
    return feat.summary(version, found), {
        "installed": True, "version": ".".join(map(str, version)) or None,
        "missing": [{"feature": f.name, "since": f.since, "without": f.without} for f in found if not f.have]}


@app.command()
def units(
    unit_dir: Annotated[str, typer.Option("--dir", help="Where systemd units live.")] = "/etc/systemd/system",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the drop-ins and write nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write the systemd drop-ins that let the shipped units write where rebal must (ReadWritePaths of
    the state directory and the [rebalance] targets), for rebal.service and rebal-due.service."""
    from .. import config, sandbox
    from ..zfs.host import ZfsHost

    cfg = load_config()
    found = sandbox.drop_ins(cfg, ZfsHost.here(), unit_dir, config.config_path(OPTS.config)[0])
    try:
        changed = [] if dry_run else [d.path for d in found if sandbox.write(d)]
    except OSError as e:
        from ..errors import UsageError

        raise UsageError(f"cannot write the drop-ins under {unit_dir}: {e.strerror} "
                         "(run as root, or give --dir)") from None
    if as_json:
        out_json({"dry_run": dry_run, "drop_ins": [{"unit": d.unit, "path": d.path, "text": d.text} for d in found],
                  "changed": changed})
        return
    out = []
    for d in found:
        state = "would write" if dry_run else ("wrote" if d.path in changed else "unchanged")
        out.append(f"{state} {d.path}:\n" + "".join(f"  {line}\n" for line in d.text.splitlines()))
    if changed:
        out.append("then: systemctl daemon-reload (and restart rebal.service if it runs)\n")
    out_text("".join(out))
