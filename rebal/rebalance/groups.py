"""The hardlink-group pass of a rebalance (`--hardlinks`): every group whose names all lie inside the
targets is rewritten as one new inode and switched name by name, journaled as one entry (see
journal.begin_group and recovery)."""

from __future__ import annotations

import os

from . import journal
from .files import FileOutcome, restore_times
from .runstate import DirReport, Run


def copy_groups(r: Run, rep: DirReport) -> DirReport:
    """Rewrite the hardlink groups of run ``r`` (runstate.Run), one at a time, each as one new inode
    under all its names; tallies go to ``rep`` (a DirReport) and the run's report."""
    for group in r.prep.scan.groups:
        if r.limit_hit():
            break
        dirs = sorted({ref.dir for ref in group})
        fds: dict[bytes, int] = {}
        times: dict[bytes, os.stat_result] = {}
        before = {d: journal.dir_state(r.conn, r.report.run_id, d) for d in dirs}
        try:
            for d in dirs:
                fds[d] = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                times[d] = os.fstat(fds[d])
                journal.start_dir(r.conn, r.report.run_id, d, times[d])
            jid = journal.begin_group(r.conn, r.report.run_id, group)
            res = r.copier.copy_group([(fds[ref.dir], ref) for ref in group],
                                      on_copy=lambda ino, jid=jid: journal.group_copied(r.conn, jid, ino))
            journal.finish_batch(r.conn, [(jid, res.outcome.value, res.reason, res.copy_ino)])
            r.events.file_done(group[0], res)
            if res.outcome is FileOutcome.SWAPPED:
                rep.files += len(group)
                rep.bytes += group[0].size
                r.report.files += len(group)
                r.report.bytes += group[0].size
            else:
                rep.skipped[res.outcome.value] = rep.skipped.get(res.outcome.value, 0) + len(group)
        except OSError as e:
            rep.skipped[f"group failed ({e.strerror})"] = rep.skipped.get(f"group failed ({e.strerror})", 0) + 1
        finally:
            for d, fd in fds.items():
                restore_times(fd, times[d])
                os.close(fd)
                # a directory the file pass left unfinished (files deferred) stays unfinished
                journal.end_dir(r.conn, r.report.run_id, d, 0, 0, before[d] in (None, "done"))
    return rep
