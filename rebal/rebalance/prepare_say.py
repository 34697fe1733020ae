"""What a rebalance's preparation says about what it found (prepare.py asks): the warnings of the
scan (snapshots, hardlinks, crash leftovers, special files, room for the largest file) and the
capacity a RAIDZ expansion holds back at the old data:parity ratio."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import RebalError
from ..units import human

if TYPE_CHECKING:
    from ..zfs.expansion import Expansion
    from ..zfs.host import ZfsHost
    from .options import Options, Target
    from .planner import DirEntry
    from .scan import ScanResult


def scan_warnings(sc: ScanResult, snaps: list[tuple[str, int, int]], reserve: float, avail: int, notes: list[str]) -> list[str]:
    """The scan's warnings, in the order a reader meets them; a note for the hardlink groups."""
    warnings: list[str] = []
    if sc.pinned_bytes:
        newest_name = snaps[-1][0]
        warnings.append(
            f"{human(sc.pinned_bytes)} of the data to rewrite is referenced by {len(snaps)} snapshot(s) "
            f"(newest {newest_name}): rewriting it grows the pool by that much instead of moving it"
        )
    hl = sc.skips.counts.get("hardlinked", 0)
    if hl:
        warnings.append(f"{hl} hardlinked file(s) ({human(sc.skips.bytes.get('hardlinked', 0))}) will be skipped "
                        "(--hardlinks re-creates link groups that lie wholly in the target)")
    out = sc.skips.counts.get("hardlinked, with names outside the target", 0)
    if out:
        warnings.append(f"{out} hardlinked file(s) have names outside the target and will be skipped")
    if sc.groups:
        notes.append(f"{len(sc.groups)} hardlink group(s) ({human(sc.group_bytes)}) will be re-created as groups "
                     "after the directories")
    if sc.skips.temps:
        warnings.append(
            f"{len(sc.skips.temps)} rebal temp or anchor name(s) found (e.g. {os.fsdecode(sc.skips.temps[0])}): "
            "left by a crash; the rebalance recovers them from the journal, or removes them where that is "
            "provably safe, and lists the rest")
    sp = sc.skips.counts.get("special file (socket, fifo or device)", 0)
    if sp:
        warnings.append(f"{sp} special file(s) (sockets, fifos, devices) will be skipped")
    if sc.largest and avail - sc.largest < reserve:
        warnings.append(
            f"not enough free space for the largest file ({human(sc.largest)}) plus the reserve "
            f"({human(reserve)}): {human(avail)} available; files that do not fit are skipped"
        )
    return warnings


def reclaim_estimate(opts: Options, targets: list[Target], host: ZfsHost, expanded: list[Expansion],
                     remaining: list[DirEntry], sc: ScanResult, reclaim_only: bool,
                     notes: list[str]) -> dict:
    """What rewriting returns after a RAIDZ expansion: the old-ratio bytes, estimated from file times,
    measured from block pointers where zdb can read them; a note saying so."""
    old_alloc = sum(d.alloc for d in remaining) if reclaim_only else sc.old_alloc
    if reclaim_only:
        old_files = sum(d.files for d in remaining)
    else:
        old_files = sc.old_files
    e = expanded[0]
    reclaim: dict[str, Any] = {
        "vdevs": [x.as_dict() for x in expanded],
        "old_ratio_files": old_files,
        "old_ratio_bytes": old_alloc,
        "how": "estimated: files last changed (ctime) before the expansion completed, less directories "
               "rewritten since; not measured from block pointers",
        "reclaim_bytes": int(old_alloc * e.reclaim_fraction),
        "goal": "reclaim" if reclaim_only else "spread and reclaim (with --all)",
    }
    measured = _measured_reclaim(opts, targets, host, expanded, notes)
    if measured:
        reclaim["estimated"] = {k: reclaim[k] for k in ("old_ratio_files", "old_ratio_bytes", "reclaim_bytes")}
        reclaim.update({k: measured[k] for k in ("old_ratio_files", "old_ratio_bytes", "reclaim_bytes")})
        reclaim["how"] = (f"measured from the block pointers of {measured['files_measured']} file(s): a block's allocated "
                          "size says the width it was written at (the rewrite still chooses files by ctime)")
        old_alloc, old_files = reclaim["old_ratio_bytes"], reclaim["old_ratio_files"]
    notes.append(
        f"{e.vdev} was expanded from {e.width_before} to {e.width_after} disks: about {human(old_alloc)} in "
        f"{old_files} files is stored at the old data:parity ratio; rewriting it returns about "
        f"{human(reclaim['reclaim_bytes'])} ({100 * reclaim['reclaim_bytes'] / max(1, old_alloc):.1f}%)"
        + ("" if reclaim_only else " (--all rewrites everything; the spread goal alone may stop sooner)"))
    return reclaim


def _measured_reclaim(opts: Options, targets: list[Target], host: ZfsHost, expanded: list[Expansion], notes: list[str]) -> dict | None:
    """The old-ratio bytes from block pointers where zdb can read them (else None: the estimate stands)."""
    import shutil

    if opts.placement == "model" or shutil.which("zdb") is None:
        return None
    from ..oldblocks import measure_reclaim

    try:
        return measure_reclaim([os.fsdecode(t.root) for t in targets], host,
                               {e.vdev: e.width_before for e in expanded})
    except RebalError as err:
        notes.append(f"old-ratio bytes not measured ({err}): estimated from file times")
        return None
