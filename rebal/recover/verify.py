"""Proof that the backup matches the source, without restoring everything.

zfs mode, for each dataset the job replicates: the newest snapshot common to both sides must have the same guid on both (a snapshot of
the same name but another guid is critical); then, inside that snapshot on each side, the file
count and total size must agree and N files chosen at random (seeded, reported) must hash the same.
A target written to since its last received snapshot is a warning: the next incremental will fail.
rsync mode: the same spot checks between the source snapshot of the last successful run and the
target directory, plus `rsync --dry-run --checksum` over the sample.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from dataclasses import dataclass, field

from ..config import Replicate
from ..health import CRITICAL, OK, WARNING, Finding
from ..process.command import run
from ..process.command import Runner
from ..zfs.host import HostError, ZfsHost
from ..replicate.policy import is_ours
from ..zfs.snapview import SnapView
from ..transport import Here, Wire, classify_ssh


@dataclass
class VerifyReport:
    job: str
    snapshot: str | None = None
    seed: int = 0
    sample: list[str] = field(default_factory=list)
    files: tuple[int, int] | None = None  # (source, target)
    bytes: tuple[int, int] | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    only_bookmark: str | None = None  # the common point, kept on the source as a bookmark only
    gated: bool = False  # the other end's gate reads no files (an older rebal there): guids compared, contents not

    @property
    def level(self) -> int:
        return max((f.level for f in self.findings), default=OK)

    def as_dict(self) -> dict:
        return {"job": self.job, "snapshot": self.snapshot, "seed": self.seed, "sample": self.sample,
                "files": self.files, "bytes": self.bytes, "findings": [f.as_dict() for f in self.findings],
                "notes": self.notes}


def local_inventory(root: str) -> dict[str, int]:
    """relative path -> size of every regular file below ``root`` (no links followed)."""
    from ..walk import regular_files

    rb = os.fsencode(root)
    return {os.fsdecode(os.path.relpath(p, rb)): st.st_size for p, st in regular_files(rb)}


def inventory(host: ZfsHost, root: str) -> dict[str, int]:
    """relative path -> size of every regular file below ``root`` on ``host``."""
    if host.local:
        return local_inventory(root)
    res = host.link.run(["find", root, "-type", "f", "-printf", "%P\\0%s\\0"], timeout=None)
    parts = res.stdout.split("\0")
    return {parts[i]: int(parts[i + 1]) for i in range(0, len(parts) - 1, 2)}


def local_hash(path: str) -> str:
    h = hashlib.sha256()
    with open(os.fsencode(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_HASH = re.compile(r"^\\?([0-9a-f]{64}) ")


def hashes(host: ZfsHost, root: str, rels: list[str]) -> list[str | None]:
    """sha256 of each file (None: missing or unreadable), read on ``host``."""
    if not rels:
        return []
    if host.local:
        out: list[str | None] = []
        for r in rels:
            try:
                out.append(local_hash(os.path.join(root, r)))
            except OSError:
                out.append(None)
        return out
    res = host.link.run(["sha256sum", "--", *[os.path.join(root, r) for r in rels]], check=False, timeout=None)
    found: list[str | None] = []
    for line in (x for x in res.stdout.split("\n") if x):
        m = _HASH.match(line)
        found.append(m.group(1) if m else None)
    return found + [None] * (len(rels) - len(found))


def choose_sample(inv: dict[str, int], n: int | None, seed: int) -> list[str]:
    names = sorted(inv)
    if n is None or n >= len(names):
        return names
    return sorted(random.Random(seed).sample(names, n))


def gated_compare(rep: VerifyReport, subject: str, view: str, there: ZfsHost, name: str, sample_n: int | None,
                  source_here: bool) -> None:
    """compare() where the other end is gated: its inventory and the sample's hashes come from the gate
    (gate/verify.py) in one round trip; the sample is drawn from this end's inventory."""
    from ..gate.verify import VERIFY, parse_answer

    mine = local_inventory(view)
    sample = choose_sample(mine, sample_n, rep.seed)
    res = there.run([VERIFY, name], check=False, timeout=None, input="\0".join(sample))
    if res.returncode != 0:
        rep.findings.append(Finding(WARNING, subject, f"contents not compared: the gate refused or failed: "
                                    f"{res.stderr.strip()[-300:]}"))
        return
    theirs, got = parse_answer(res.stdout)
    src_inv, dst_inv = (mine, theirs) if source_here else (theirs, mine)
    here_h = {r: h for r, h in zip(sample, hashes(ZfsHost(Here()), view, sample))}
    src_h, dst_h = (here_h, got) if source_here else (got, here_h)
    judge(rep, subject, src_inv, dst_inv, sample, [src_h.get(r) for r in sample], [dst_h.get(r) for r in sample])
    rep.notes.append("read through the gate on the other end: its files were hashed there (rebal-gate-verify)")


def compare(rep: VerifyReport, subject: str, source: ZfsHost, src_root: str, backup: ZfsHost, dst_root: str,
            sample_n: int | None) -> None:
    """File count, sizes and a sample's hashes of the same point on both hosts."""
    src_inv, dst_inv = inventory(source, src_root), inventory(backup, dst_root)
    sample = choose_sample(src_inv, sample_n, rep.seed)
    judge(rep, subject, src_inv, dst_inv, sample, hashes(source, src_root, sample), hashes(backup, dst_root, sample))


def judge(rep: VerifyReport, subject: str, src_inv: dict[str, int], dst_inv: dict[str, int], sample: list[str],
          src_h: list[str | None], dst_h: list[str | None]) -> None:
    """The findings of two inventories and a sample's hashes on both sides."""
    rep.files = (len(src_inv), len(dst_inv))
    rep.bytes = (sum(src_inv.values()), sum(dst_inv.values()))
    if rep.files[0] != rep.files[1] or rep.bytes[0] != rep.bytes[1]:
        missing = sorted(set(src_inv) - set(dst_inv))[:5]
        extra = sorted(set(dst_inv) - set(src_inv))[:5]
        rep.findings.append(Finding(CRITICAL, subject, f"file count or size differ: source {rep.files[0]} files "
                                    f"{rep.bytes[0]} bytes, backup {rep.files[1]} files {rep.bytes[1]} bytes"
                                    + (f"; missing on the backup: {', '.join(missing)}" if missing else "")
                                    + (f"; only on the backup: {', '.join(extra)}" if extra else "")))
    rep.sample = sample
    for rel, mine, th in zip(sample, src_h, dst_h):
        if mine is None:
            rep.findings.append(Finding(CRITICAL, subject, f"{rel}: cannot be read on the source"))
        elif th is None:
            rep.findings.append(Finding(CRITICAL, subject, f"{rel}: missing or unreadable on the backup"))
        elif th != mine:
            rep.findings.append(Finding(CRITICAL, subject, f"{rel}: content differs on the backup (sha256)"))


def verify_zfs(job: Replicate, link: Wire, sample_n: int | None, seed: int, runner: Runner = run) -> VerifyReport:
    """Every dataset the job replicates (the source alone, or for a recursive job each one its rules
    choose), each at the newest snapshot both sides have: the findings of all, the files and bytes
    summed, the sample named per dataset. ``link`` reaches the job's other end (the backup host of a
    push job, the file server of a pull job): the two hosts are the job's, whichever end this is.
    Through a gated key (rebal gate) the other end's files are hashed there by the gate
    (rebal-gate-verify): names, sizes and hashes come back, never the data."""
    from ..replicate.remote import gate_info
    from ..replicate.sides import job_hosts

    source, backup = job_hosts(job, link if not link.local else Here(runner))
    rep = VerifyReport(job.name, seed=seed)
    gate = None if link.local else gate_info(ZfsHost(link))
    rep.gated = gate is not None and not gate.get("verify")  # contents cannot be compared through it
    if job.recursive:
        from ..replicate.select import select

        datasets = select(job, source).included
    else:
        datasets = [job.source]
    for ds in datasets:
        one = VerifyReport(job.name, seed=seed)
        tds = job.target + ds[len(job.source):]
        _verify_dataset(one, job, source, backup, ds, tds, sample_n, many=len(datasets) > 1, gate=gate)
        rep.findings += one.findings
        rep.notes += one.notes
        rep.snapshot = rep.snapshot or one.snapshot
        rep.only_bookmark = rep.only_bookmark or one.only_bookmark
        if one.files is not None and one.bytes is not None:
            f0, f1 = rep.files or (0, 0)
            b0, b1 = rep.bytes or (0, 0)
            rep.files = (f0 + one.files[0], f1 + one.files[1])
            rep.bytes = (b0 + one.bytes[0], b1 + one.bytes[1])
        rep.sample += [f"{ds}: {x}" for x in one.sample] if len(datasets) > 1 else one.sample
    return rep


def _verify_dataset(rep: VerifyReport, job: Replicate, source: ZfsHost, backup: ZfsHost, ds: str, tds: str,
                    sample_n: int | None, many: bool, gate: dict | None = None) -> None:
    subject = f"job:{job.name}"
    said = f"{ds}: " if many else ""
    src = source.snapshots(ds, bookmarks=True)
    if src is None:
        rep.findings.append(Finding(CRITICAL, subject, f"the source {ds} does not exist on {source.where}"))
        return
    tgt = backup.snapshots(tds)
    if tgt is None:
        rep.findings.append(Finding(CRITICAL, subject, f"the target {tds} does not exist on the backup host"))
        return
    by_name = {s.name: s for s in src if not s.bookmark}
    for t in tgt:
        s = by_name.get(t.name)
        if s is not None and s.guid != t.guid:
            rep.findings.append(Finding(CRITICAL, subject, f"{said}@{t.name} on the backup is not the source's @{t.name} "
                                        f"(guid {t.guid} vs {s.guid}): the backup holds other data under that name"))
    have = {t.guid for t in tgt}
    common = [s for s in src if s.guid in have]
    if not common:
        rep.findings.append(Finding(CRITICAL, subject, f"{said}no snapshot in common between the source and the backup"))
        return
    base = max(common, key=lambda s: (s.txg, not s.bookmark))
    rep.snapshot = base.name
    if gate is not None and not gate.get("verify"):
        rep.findings.append(Finding(WARNING, subject, (
            f"{said}contents not compared: the gate on the other end is of a rebal without rebal-gate-verify, which "
            f"lets nothing read files there; the backup's @{base.name} is the source's by guid. Update rebal there")))
        return
    if base.bookmark:
        # the source keeps the point as a bookmark only (retention_source keeps no snapshot): the
        # backup is the same point by guid, but there is no source content of that time to compare
        # (`backups.verify` then replicates once more and compares at that run's snapshot)
        rep.only_bookmark = base.name
        rep.findings.append(Finding(WARNING, subject, (
            f"{said}contents not compared: the source keeps @{base.name} only as a bookmark (the job's retention_source "
            "keeps no snapshot), so there is nothing of that time to compare the backup with; the backup's "
            f"@{base.name} is that point by guid. Set retention_source.last = 1 to verify contents "
            "(that snapshot then pins what a rebalance rewrites)")))
        return
    try:
        keystatus = backup.values(tds, ["keystatus"], recursive=False).get(tds, {}).get("keystatus")
    except HostError:  # a zfs without encryption (zfs-fuse) has no such property
        keystatus = None
    if keystatus == "unavailable":
        # a raw send's backup: encrypted there, its key not loaded (the backup host cannot read it, by
        # design); the same snapshot by guid is the same blocks, checksummed as they were received
        rep.notes.append(f"{said}the backup holds {tds} encrypted (raw send, its key not loaded there): @{base.name} "
                         "is the source's by guid; its files cannot be read there to compare")
        return
    newest_tgt = max(tgt, key=lambda s: s.txg)
    if _modified_since(backup, tds, newest_tgt.name, rep):
        rep.findings.append(Finding(WARNING, subject, f"the backup dataset {tds} was written to since its last "
                                    f"received snapshot @{newest_tgt.name}: the next incremental will fail. What was "
                                    f"written exists only there: `zfs diff {tds}@{newest_tgt.name}` on the backup "
                                    f"host shows it, a snapshot of it keeps it; find who writes there (set "
                                    f"readonly=on). `rebal replicate {job.name} --force-rollback {tds}` destroys "
                                    "those writes"))
    if gate is not None:  # the other end's files read there, by the gate: hashes come back, not data
        here, there, name = (source, backup, f"{tds}@{base.name}") if source.local else (backup, source, f"{ds}@{base.name}")
        with SnapView(here, ds if source.local else tds, base.name, f"verify-{job.name}", rep.notes) as view:
            gated_compare(rep, subject, view, there, name, sample_n, source_here=source.local)
        return
    with SnapView(source, ds, base.name, f"verify-{job.name}", rep.notes) as sv, \
            SnapView(backup, tds, base.name, f"verify-{job.name}", rep.notes) as tv:
        compare(rep, subject, source, sv, backup, tv, sample_n)


def _modified_since(backup: ZfsHost, ds: str, snap: str, rep: VerifyReport) -> bool:
    backup.settle(ds.split("/")[0])
    try:
        written = backup.props(ds, ["written"]).get("written", {}).get("value", "")
    except HostError:
        written = ""
    if written.isdigit():
        return int(written) > 0
    # old ZFS has no `written`: compare what the dataset and its newest snapshot reference
    try:
        a = backup.props(ds, ["referenced"])["referenced"]["value"]
        b = backup.props(f"{ds}@{snap}", ["referenced"])["referenced"]["value"]
    except (HostError, KeyError):
        a = b = ""
    rep.notes.append("this ZFS has no `written` property: a change on the backup is judged by its size")
    return a.isdigit() and b.isdigit() and a != b


def verify_rsync(job: Replicate, ssh: Wire, sample_n: int | None, seed: int, snapshot: str | None,
                 runner: Runner = run) -> VerifyReport:
    rep = VerifyReport(job.name, seed=seed)
    subject = f"job:{job.name}"
    here = ZfsHost(Here(runner))
    have = here.snapshots(job.source)
    if have is None:
        raise HostError(f"this host: {job.source} does not exist")
    if snapshot is None or not any(s.name == snapshot for s in have):
        ours = [s.name for s in have if is_ours(s.name, job.name)]
        if not ours:
            rep.findings.append(Finding(CRITICAL, subject, "no snapshot of a successful run to compare against"))
            return rep
        snapshot = ours[-1]
    rep.snapshot = snapshot
    with SnapView(here, job.source, snapshot, f"verify-{job.name}", rep.notes) as sv:
        compare(rep, subject, here, sv, ZfsHost(ssh), job.target, sample_n)
        # and rsync's own opinion over the sample, by checksum
        if rep.sample:
            files = "\0".join(rep.sample) + "\0"
            argv = ["rsync", "-n", "-c", "-a", "--from0", "--files-from=-", "--out-format=%n", "--protect-args",
                    *ssh.rsync_remote(), sv.rstrip("/") + "/", ssh.rsync_path(job.target.rstrip('/') + "/")]
            r = run(argv, input=files, check=False, timeout=None)
            if r.returncode == 255:
                raise classify_ssh(ssh.ep, r.stderr)
            for name in r.stdout.splitlines():
                if name and not name.endswith("/"):
                    rep.findings.append(Finding(CRITICAL, subject, f"{name}: rsync --checksum finds it differs"))
    return rep
