"""rebal gate (the ssh forced command of a backup host or a pulled file server) and rebal prune."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated, Optional

import typer

from . import complete
from .app import JsonOpt, app
from .io import load_config, out_json, out_text


@app.command()
def gate(
    receive_into: Annotated[Optional[str], typer.Option("--receive-into", metavar="DATASET", help="Backup host of push jobs: allow receiving under DATASET only.")] = None,
    send_from: Annotated[Optional[str], typer.Option("--send-from", metavar="DATASET", help="File server of pull jobs: allow sending DATASET (and its children) only.")] = None,
    allow_rollback: Annotated[bool, typer.Option("--allow-rollback", help="Also allow zfs receive -F (a push with --force-rollback).")] = False,
    log_file: Annotated[Optional[str], typer.Option("--log", metavar="FILE", help="Also log every command, allowed or refused, to FILE.")] = None,
    command: Annotated[Optional[str], typer.Option("--command", help="Check this command line instead of $SSH_ORIGINAL_COMMAND (for testing a key).")] = None,
    check_only: Annotated[bool, typer.Option("--check", help="Only say whether the command would be allowed; run nothing.")] = False,
    allow_for: Annotated[Optional[str], typer.Option("--allow-for", metavar="USER", help="Print the zfs allow command that gives USER (the key's login, not root) what this gate needs here, the least this host's zfs can express (receive:append on OpenZFS 2.3.2+).")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="With --send-from --allow-for: the jobs send raw (send:encrypted on OpenZFS 2.4+).")] = False,
    max_snapshots: Annotated[int, typer.Option("--max-snapshots", metavar="N", min=1, help="At most N of rebal's own snapshots per dataset may exist for the key to make another (a flood would pin this host's space).")] = 500,
) -> None:
    """The ssh forced command that lets a replication job do its work and nothing else
    (command="rebal gate --receive-into backup/tank-data",restrict in authorized_keys)."""
    from ..errors import UsageError
    from ..gate.check import Policy, Refused, check
    from ..gate.serve import serve

    if receive_into is not None and send_from is None:
        mode, root = "receive", receive_into
    elif send_from is not None and receive_into is None:
        mode, root = "send", send_from
    else:
        raise UsageError("give exactly one of --receive-into DATASET or --send-from DATASET")
    if allow_rollback and send_from:
        raise UsageError("--allow-rollback goes with --receive-into")
    policy = Policy(mode, root, allow_rollback, max_snapshots=max_snapshots)
    if allow_for is not None:
        from ..gate.check import allow_set
        from ..zfs.host import ZfsHost

        host = ZfsHost.here()
        on = policy.root
        if policy.mode == "receive" and "/" in on and not host.exists(on):
            on = on.rsplit("/", 1)[0]  # the target does not exist before its first receive: its parent creates it
        argv, notes = allow_set(policy.mode, on, allow_for, host.version(), raw, allow_rollback)
        if on != policy.root:
            notes.append(f"{policy.root} does not exist yet: allowed on {on}, where its first receive creates it "
                         f"(the gate still confines the key to {policy.root})")
        out_text("# as root on this host:\n" + " ".join(argv) + "\n" + "".join(f"# {n}\n" for n in notes))
        return
    line = command if command is not None else os.environ.get("SSH_ORIGINAL_COMMAND")
    if check_only:
        try:
            stages = check(policy, line or "")
        except Refused as e:
            out_text(f"refused: {e}\n")
            raise typer.Exit(2) from None
        out_text("allowed: " + " | ".join(" ".join(s) for s in stages) + "\n")
        return
    raise typer.Exit(serve(policy, line, log_file))


@app.command()
def prune(
    dataset: Annotated[str, typer.Argument(help="The backup dataset (on this host) holding the job's snapshots.", autocompletion=complete.datasets)],
    job: Annotated[str, typer.Option("--job", help="The replication job whose snapshots (rebal-JOB-*) are pruned.")],
    recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Its child datasets too.")] = False,
    last: Annotated[Optional[int], typer.Option(min=0, help="Keep the newest N.")] = None,
    hourly: Annotated[Optional[int], typer.Option(min=0)] = None,
    daily: Annotated[Optional[int], typer.Option(min=0)] = None,
    weekly: Annotated[Optional[int], typer.Option(min=0)] = None,
    monthly: Annotated[Optional[int], typer.Option(min=0)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be destroyed; destroy nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Retention on the backup host: destroy a job's snapshots its policy does not keep (never the
    newest: the next incremental's base). Defaults: the job's retention_target in this host's config
    if it has the job, else last=1 hourly=24 daily=7 weekly=4 monthly=6."""
    from ..replicate.policy import Buckets
    from ..replicate.prune import prune as do_prune

    cfg = load_config()
    j = cfg.job(job)
    base = j.retention_target if j is not None else None
    given = {"last": last, "hourly": hourly, "daily": daily, "weekly": weekly, "monthly": monthly}
    b = Buckets(**{k: (v if v is not None else getattr(base, k) if base is not None else getattr(Buckets(), k))
                   for k, v in given.items()})
    rep = do_prune(dataset, job, b, recursive=recursive, dry_run=dry_run)
    if as_json:
        out_json(asdict(rep) | {"retention": asdict(b)})
    else:
        verb = "would destroy" if dry_run else "destroyed"
        lines = [f"{dataset}: job {job}: kept {len(rep.kept)}, {verb} {len(rep.destroyed)}"]
        lines += [f"  {verb} {x}" for x in rep.destroyed] + [f"  FAILED {x}" for x in rep.failed]
        out_text("\n".join(lines) + "\n")
    if rep.failed:
        raise typer.Exit(1)
