"""The steps of `rebal rebuild` (rebuild.py holds the procedure and its record)."""

from __future__ import annotations

import shlex

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import replace

from ..config import Config, Replicate
from ..errors import RebalError
from ..outcome import Outcome
from ..zfs.host import ZfsHost
from ..transport import Wire
from .verify import VerifyReport
from .rebuild_record import NOT_SET_AGAIN, Record, RebuildError, RebuildRefused, save

EMPTY = 1 << 20  # what a dataset may reference and hold no files (an empty file system: some 100 KiB)


def coverage(rec: Record, j: Replicate, here: ZfsHost) -> None:
    """Every dataset of the pool is in the job, or named left out; the pool's root may be outside the
    job when it holds nothing of its own."""
    from ..replicate.select import select

    every = here.datasets(rec.pool)
    unknown = [d for d in rec.left_out if d not in every]
    if unknown:
        raise RebuildRefused(f"--leave-out {', '.join(unknown)}: no such dataset in {rec.pool}")
    chosen = set(select(j, here).included)
    rec.datasets = [d for d in every if d in chosen]
    outside = [d for d in every if d not in chosen and not any(d == x or d.startswith(x + "/") for x in rec.left_out)]
    if rec.pool in outside:
        used = here.values(rec.pool, ["referenced"], recursive=False).get(rec.pool, {}).get("referenced", "")
        if used.isdigit() and int(used) <= EMPTY:
            outside.remove(rec.pool)  # made again by zpool create; its own properties are recorded
    # the datasets between the pool and the job's source are made again by the admin's zfs create -p
    outside = [d for d in outside if not j.source.startswith(d + "/")]
    if outside:
        raise RebuildRefused(f"not backed up by job {j.name}: {', '.join(outside[:8])}"
                             f"{' ...' if len(outside) > 8 else ''}. Destroying {rec.pool} would lose them: add them "
                             f"to a job, or name them with --leave-out if they may go")


def final_point(cfg: Config, rec: Record, j: Replicate, link: Wire, here: ZfsHost, conn: sqlite3.Connection, *, seed: int,
                writers_stopped: bool) -> None:
    """A last replication whose snapshot the source keeps (the restore point), nothing written after
    it, and every file of the backup equal to the source's at it."""
    from ..locks import Together
    from ..replicate.job import run_job
    from .verify import verify_zfs

    rs = j.retention_source
    keep = replace(j, retention_source=replace(rs, last=max(1, rs.last)))
    with Together(cfg.state_db, [j.name], f"rebuild check of {rec.pool}"):
        outcome, details = run_job(replace(cfg, replicate=[keep if x.name == j.name else x for x in cfg.replicate]),
                                   j.name, conn=conn, every=True)
    snap = details.get("snapshot")
    if outcome not in (Outcome.OK, Outcome.WARNING) or not snap:
        raise RebuildError(f"the last replication of job {j.name} failed: {details.get('error') or outcome}")
    rec.point = snap
    here.sync(rec.pool)
    try:
        written = here.values(j.source, [f"written@{snap}"], recursive=j.recursive)
    except RebalError:  # an older ZFS (zfs-fuse): no written@ property
        written = {d: {} for d in rec.datasets}
    busy = {d: v.get(f"written@{snap}", "") for d, v in written.items() if d in rec.datasets}
    if any(not v.isdigit() for v in busy.values()):
        if not writers_stopped:  # (asked before the work too: rebuild.check)
            raise RebuildRefused(f"this ZFS cannot say whether anything was written after @{snap} (no written@ "
                                 "property): stop every writer, then pass --writers-stopped")
        rec.notes.append("the writers were said stopped (--writers-stopped): this ZFS cannot check it")
    elif any(int(v) for v in busy.values()):
        late = ", ".join(f"{d} ({v} bytes)" for d, v in busy.items() if int(v))
        raise RebuildRefused(f"written after @{snap}: {late}. Stop the writers (services, shares, cron), then run "
                             "this again: a rebuild restores the pool as it is at that snapshot")
    rep = verify_zfs(j, link, None, seed)
    if rep.level or rep.snapshot != snap:
        why = _why(rep, snap)
        raise RebuildError(f"the backup does not equal {rec.pool} at @{snap}: {why}")
    rec.files = [(rep.files or (0, 0))[0], (rep.bytes or (0, 0))[0]]
    rec.notes += [n for n in rep.notes if "encrypted" in n]
    save(conn, rec, "pointed", f"@{snap}: nothing written after it; {rec.files[0]} files equal on the backup")


def create_command(pool: str, ashift: int, pool_props: dict[str, str], root_props: dict[str, str]) -> str:
    """The `zpool create` an admin runs as printed: each value quoted for a shell (a pool comment is
    text anyone with zpool set could have written), and of the features only those the old pool had
    disabled (`zpool create` enables every feature, and takes only enabled or disabled: `active` is a
    state the pool reaches by using one)."""
    opts = [f"ashift={ashift}"] + [f"{k}={v}" for k, v in sorted(pool_props.items())
                                   if not (k.startswith("feature@") and v != "disabled")]
    args = [a for o in opts for a in ("-o", o)] + [a for k, v in sorted(root_props.items()) for a in ("-O", f"{k}={v}")]
    return f"zpool create {shlex.join([*args, pool])} <the new layout, e.g. mirror DISK1 DISK2 mirror DISK3 DISK4>"


def record_pool(rec: Record, j: Replicate, here: ZfsHost, ashift: int) -> None:
    allp = here.pool_props(rec.pool, local_only=False)
    rec.pool_guid, rec.ashift = allp.get("guid", ""), allp.get("ashift", "")
    rec.layout = here.status_text(rec.pool)
    rec.pool_props = {k: v for k, v in here.pool_props(rec.pool).items() if k not in ("ashift", "guid")}
    props = here.local_props(rec.pool)
    keep = set(rec.datasets) | {rec.pool}
    rec.props = {d: {k: v for k, v in p.items() if k not in NOT_SET_AGAIN and k != "keylocation"}
                 for d, p in props.items() if d in keep}
    try:
        crypt = here.values(j.source, ["encryption", "encryptionroot", "keylocation", "keyformat"], recursive=j.recursive)
    except RebalError:  # a ZFS without native encryption (zfs-fuse, before OpenZFS 0.8)
        crypt = {}
    rec.crypt = {d: v for d, v in crypt.items() if d in rec.datasets and v.get("encryption", "off") not in ("off", "-", "")}
    root = {k: v for k, v in rec.props.get(rec.pool, {}).items() if j.source != rec.pool and k != "mountpoint"}
    rec.commands = [f"zpool destroy {rec.pool}", create_command(rec.pool, ashift, rec.pool_props, root)]
    parent = j.source.rsplit("/", 1)[0]
    if j.source != rec.pool and parent != rec.pool:
        rec.commands.append(f"zfs create -p {parent}")
    rec.commands.append(f"rebal rebuild {rec.pool} --continue")
    if rec.crypt:
        keys = sorted({v.get("keylocation", "") for v in rec.crypt.values() if v.get("keylocation", "") not in ("", "none", "-")})
        rec.notes.append("encrypted datasets come back raw: keep their keys at hand (" + ", ".join(keys) + ")")


def restore_all(rec: Record, j: Replicate, link: Wire, *, stop: threading.Event | None = None,
                progress: Callable[[int], None] | None = None) -> None:
    from .restore import RestorePoint
    from .restore_tree import restore_tree

    rep = restore_tree(j, link, RestorePoint(rec.point, None), j.source, stop=stop, progress=progress)
    missing = [d.target for d in rep.datasets if d.kind == "missing"]
    if missing:
        rec.notes.append(f"not in the backup at @{rec.point}: {', '.join(missing)}")


def encryption_again(rec: Record, here: ZfsHost) -> None:
    """A raw receive makes every encrypted dataset its own encryption root: load each key from where
    it was, and make those that inherited their root's key inherit it again (zfs change-key -i)."""
    for ds in sorted(rec.crypt, key=lambda d: d.count("/")):
        c = rec.crypt[ds]
        root = c.get("encryptionroot", ds)
        location = (rec.crypt.get(root) or c).get("keylocation", "prompt")
        if location in ("prompt", "", "-", "none"):
            raise RebuildError(f"{ds}: its key was typed in (keylocation=prompt): run zfs load-key {ds}, then "
                               f"rebal rebuild {rec.pool} --continue")
        now = here.values(ds, ["keystatus", "keylocation"], recursive=False).get(ds, {})
        if now.get("keystatus") != "available":
            res = here.load_key(ds, location)
            if res.returncode != 0:
                raise RebuildError(f"{ds}: zfs load-key -L {location}: {res.stderr.strip()}")
        if root == ds and now.get("keylocation") != location:
            here.set(ds, "keylocation", location)
        if root != ds and here.values(ds, ["encryptionroot"], recursive=False).get(ds, {}).get("encryptionroot") != root:
            here.change_key_inherit(ds)
        here.mount(ds)


def properties_again(rec: Record, here: ZfsHost) -> None:
    failed = []
    for ds in sorted(rec.props, key=lambda d: d.count("/")):
        if ds == rec.pool and ds not in rec.datasets:
            continue  # the admin's zpool create -O set the root's
        for prop, value in sorted(rec.props[ds].items()):
            try:
                here.set(ds, prop, value)
            except RebalError as e:
                failed.append(f"{ds} {prop}={value}: {e}")
    if failed:
        rec.notes.append("not set again: " + "; ".join(failed[:5]))


def verify_all(rec: Record, j: Replicate, link: Wire) -> None:
    from .verify import verify_zfs

    rep = verify_zfs(j, link, None, 0)
    if rep.level or rep.snapshot != rec.point:
        why = _why(rep, rec.point)
        raise RebuildError(f"the restored {rec.pool} does not equal the backup: {why}. Nothing was destroyed; "
                           f"rebal rebuild {rec.pool} --continue checks again")
    rec.files = [(rep.files or (0, 0))[0], (rep.bytes or (0, 0))[0]]


def _why(rep: VerifyReport, point: str) -> str:
    """The verify's findings, short: the first three (rebal verify JOB --sample all lists them all)."""
    if not rep.findings:
        return f"compared at @{rep.snapshot}, not @{point}"
    out = "; ".join(f.message[:300] for f in rep.findings[:3])
    more = len(rep.findings) - 3
    return out + (f"; and {more} more (rebal verify JOB --sample all lists them)" if more > 0 else "")
