"""rebal replicate, backups, restore, verify, keys, heal."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from typing import Annotated, Optional

import typer

from . import complete
from .app import JsonOpt, app
from .io import Signals, load_config, out_json, out_text, say_error, state_or_none, warn
from ..outcome import Outcome


@app.command()
def replicate(
    job: Annotated[str, typer.Argument(help="Name of a [[replicate]] job in the config.", autocompletion=complete.replication_jobs)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be sent and pruned; change nothing.")] = False,
    force_rollback: Annotated[Optional[list[str]], typer.Option("--force-rollback", metavar="DATASET", help="Let zfs receive -F roll back this dataset's backup (name it, source or backup name; again for another): it destroys the backup's snapshots newer than the common one and what was written there since. The run lists what it destroyed.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replicate a job to its backup host now (zfs send/receive or rsync, over ssh)."""
    from ..replicate.wire import early

    cfg = load_config()
    wire = early(cfg, job)  # its handshake overlaps what follows
    try:
        from ..replicate.job import run_job
        from ..views.replicate import replication_text
        from .progress import ByteBar

        with Signals() as sig, ByteBar(f"replicate {job}", enabled=not (as_json or dry_run)) as bar:
            outcome, details = run_job(cfg, job, dry_run=dry_run, force_rollback=tuple(force_rollback or ()),
                                       stop=sig.stop, progress=bar.update if bar.wanted else None, on_wait=warn,
                                       on_dataset=bar.dataset if bar.lines else None, wire=wire)
    finally:
        if wire is not None:  # (run_job closes it too, however the run ends)
            wire.close()
    if as_json:
        out_json(details | {"outcome": outcome})
    elif outcome != Outcome.FAILED:
        out_text(replication_text(outcome, details))
    if outcome == Outcome.FAILED:  # the report of what got done, then why it failed, on stderr
        if not as_json:
            sys.stderr.write(replication_text(outcome, details))
        say_error(f"replicate {job} failed: {details.get('error') or 'see the JSON on stdout'}")
        raise typer.Exit(details.get("exit_code", 1))
    if outcome == Outcome.INTERRUPTED:
        raise typer.Exit(sig.exit_code())


@app.command()
def backups(job: Annotated[str, typer.Argument(help="Replication job.", autocompletion=complete.replication_jobs)], as_json: JsonOpt = False) -> None:
    """The restore points of a job on the backup host: snapshots with times and sizes."""
    from ..recover.backups import list_points
    from ..views.replicate import backups_text

    j, ds, pts, newest = list_points(load_config(), job)
    if as_json:
        out_json({"job": job, "mode": j.mode, "dataset": ds, "target": j.target, "points": [p.as_dict() for p in pts],
                  "newest": newest})
    else:
        out_text(backups_text(job, j.mode, j.target_host or "this host", ds or j.target, pts, newest))


@app.command()
def restore(
    job: Annotated[str, typer.Argument(help="Replication job.", autocompletion=complete.replication_jobs)],
    to: Annotated[str, typer.Option("--to", help="New dataset (whole restore; with --all the root of the tree), or a directory (with --path).")],
    at: Annotated[str, typer.Option("--at", help="Snapshot name, or latest.")] = "latest",
    path: Annotated[Optional[str], typer.Option("--path", help="A file or directory inside the backup, relative to its root.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing destination (even the live source).")] = False,
    whole_tree: Annotated[bool, typer.Option("--all", help="Every dataset of a recursive job, parents first, resumable; "
                                                          "under the job's own names, its replication goes on incrementally.")] = False,
    key_location: Annotated[Optional[str], typer.Option("--key-location", metavar="URI", help="With --all of a raw job: where the encryption key is (file:///...): keys loaded, children inherit their parent's encryption root again.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be restored; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Get data back: a whole dataset (or with --all the whole tree) into a NEW dataset, or one file or directory into a directory."""
    from ..recover import backups
    from ..recover.restore_tree import TreeRestoreFailed
    from ..views.replicate import restore_text
    from .progress import ByteBar

    cfg = load_config()
    with Signals() as sig, ByteBar(f"restore {job}", enabled=not (as_json or dry_run or path)) as bar:
        try:
            rep = backups.restore(cfg, job, to=to, at=at, path=path, force=force, dry_run=dry_run, stop=sig.stop,
                                  progress=bar.update, whole_tree=whole_tree, key_location=key_location)
        except TreeRestoreFailed as e:
            if as_json:
                out_json(asdict(e.report) | {"dry_run": False, "error": str(e)})
            raise
    if as_json:
        out_json(asdict(rep) | {"dry_run": dry_run})
    else:
        out_text(restore_text(job, rep, dry_run))


@app.command()
def verify(
    job: Annotated[str, typer.Argument(help="Replication job.", autocompletion=complete.replication_jobs)],
    sample: Annotated[str, typer.Option(help="How many files to hash on both sides, or all.")] = "20",
    seed: Annotated[Optional[int], typer.Option(help="Seed of the random sample (reported, to repeat a check).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check the backup against the source: snapshot guid, file count and size, hashes of a sample.
    Exit 0 good, 1 warning, 2 the backup differs (also a health finding and a notification)."""
    import random

    from .. import health as H
    from ..recover import backups
    from ..views.replicate import verify_text

    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    level, rep = backups.verify(load_config(), job, sample, seed)
    if as_json:
        out_json(rep.as_dict() | {"level": H.LEVEL_NAMES[level]})
    else:
        out_text(verify_text(job, rep, H.LEVEL_NAMES[level]))
    raise typer.Exit(level)


@app.command()
def keys(
    job: Annotated[str, typer.Argument(help="Name of a [[replicate]] job in the config.", autocompletion=complete.replication_jobs)],
    pin: Annotated[Optional[str], typer.Option("--pin", metavar="SHA256:...", help="Pin the other host's key with this fingerprint, checked on that host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub there).")] = None,
    install: Annotated[bool, typer.Option("--install", help="Append the key's line to the other host's authorized_keys over your own ssh login.")] = False,
    login_identity: Annotated[Optional[str], typer.Option("--login-identity", metavar="FILE", help="With --install: the key you log in with (default: your ssh's own, or a password).")] = None,
    authorized_keys: Annotated[str, typer.Option("--authorized-keys", metavar="PATH", help="With --install: the file there, relative to the login's home.")] = ".ssh/authorized_keys",
    rebal_path: Annotated[str, typer.Option("--rebal-path", metavar="PATH", help="Where rebal is on the other host, for the gate.")] = "/usr/bin/rebal",
    check: Annotated[bool, typer.Option("--check/--no-check", help="End with a dry run of the job (once the host key is pinned).")] = True,
    gate_root: Annotated[Optional[str], typer.Option("--gate-root", metavar="DATASET", help="An rsync job: the dataset on the backup host its target directory is on (the gate lets the key write there only).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set up a job's ssh: its key, the other host's key pinned, the gated authorized_keys line there, a dry run."""
    from ..replicate.job import find_job, run_job
    from ..replicate.pairing import pair
    from ..views.replicate import pairing_text

    cfg = load_config()
    p = pair(find_job(cfg, job), pin=pin, do_install=install, login_identity=login_identity,
             authorized_keys=authorized_keys, rebal_path=rebal_path, gate_root=gate_root)
    from ..errors import RebalError

    code = 0
    if check and p.host is not None and p.pinned:  # the whole way, as a run would go it
        try:
            outcome, details = run_job(cfg, job, dry_run=True, on_wait=warn)
            p.dry_run = Outcome.OK if outcome != Outcome.FAILED else f"{Outcome.FAILED}: {details.get('error')}"
            code = details.get("exit_code", 1) if outcome == Outcome.FAILED else 0
        except RebalError as e:  # (ssh refused the key): said after what was done, not instead of it
            p.dry_run, code = f"{Outcome.FAILED}: {e}", e.exit_code
    if p.host is not None and os.path.exists(cfg.state_db):  # (keys itself never makes the database)
        from .. import state

        conn = state_or_none(cfg, "keys cannot tell whether the job has run before")
        p.replicated = conn is not None and any(r["job"] == job and r["last_success"]
                                                for r in state.last_successes(conn, cfg))
    if as_json:
        out_json(asdict(p))
    else:
        out_text(pairing_text(p))
    raise typer.Exit(code)


@app.command()
def heal(
    pool: Annotated[str, typer.Argument(help="The pool whose damaged files to repair.", autocompletion=complete.pools)],
    job: Annotated[Optional[str], typer.Option("--job", help="The zfs replication job to heal from (default: every one of the pool).", autocompletion=complete.replication_jobs)] = None,
    restore_to: Annotated[Optional[str], typer.Option("--restore-to", metavar="DIR", help="Put the backup's copy of each file that cannot be healed in this directory (never over the live file).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be healed and from which snapshot; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Repair the files zpool status -v lists as damaged, from the backup's snapshots (zfs receive -c).
    Exit 0 when every one is healed (or none is damaged), 1 when some are not."""
    from ..recover.heal import heal as do_heal
    from ..views.replicate import heal_text

    with Signals() as sig:
        rep = do_heal(load_config(), pool, job=job, dry_run=dry_run, restore_to=restore_to, stop=sig.stop)
    if as_json:
        out_json(asdict(rep) | {"dry_run": dry_run})
    else:
        out_text(heal_text(rep, dry_run))
    if rep.unhealed and not dry_run:
        raise typer.Exit(1)
