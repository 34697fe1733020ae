"""The directories of a `zfs rewrite` rebalance (method rewrite): every eligible file rewritten in
place by `zfs rewrite -v [-P]` processes, each handed thousands of paths from several directories.

Why the command and not rebal's own loop: the kernel does the same work either way, but a loop of
open/ioctl/close in Python cost 1.25-1.4x the command's loop in C (issue 19, measured on OpenZFS
2.4.4), and a process per directory or per 256 paths cost more than the rewrite of small files.
In place, same inode: names, times and links do not change and a crash leaves each file either
rewritten or not with the same content, so nothing needs a journal entry before it; the caller
records each directory done once the batch that held it has ended.

Batches are cut by files (the command line's length), by bytes (the next measurement of the pool,
--max-bytes, --max-rate, --max-growth) and to one directory when the model says the target is near,
so the run stops at the target as often as it did directory by directory. `-v` names each file
rewritten; a stop (Ctrl-C, SIGTERM, --until) ends the processes at once and what they named counts.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Executor, ThreadPoolExecutor

PROC_FILES = 16384  # paths per `zfs rewrite` process (PROC_ARGV is what usually binds)
PROC_ARGV = 1 << 20  # bytes of paths per process: under ARG_MAX (2 MiB with the usual 8 MiB stack)
PROC_MIN = 512  # fewer paths than this per extra process: its start costs more than it brings
BATCH_BYTES = 4 << 30  # a batch at most this much data, so progress and the limits are seen often
GONE = "gone or replaced since the scan"


def eligible(r, d, root: bytes, dev: int) -> list:
    """(name, lstat) of the files of directory ``d`` to rewrite. Runs on one scanning thread ahead
    of the rewrite (the hardlink set is only ever touched here, in directory order)."""
    from .scan import candidates

    files = []
    for n, st in candidates(d.path, root, dev, r.filters, hardlinks_ok=True):
        if st.st_nlink > 1:  # an inode with several names is rewritten once
            if st.st_ino in r.linked_seen:
                continue
            r.linked_seen.add(st.st_ino)
        files.append((n, st))
    return files


def procs_for(jobs: int, nfiles: int, cores: int | None = None) -> int:
    """How many `zfs rewrite` processes share a batch: no more than the cores (the kernel's rewrite
    of cached data is CPU work), at most 4. Measured on OpenZFS 2.4.4, 2 vCPUs, 40,000 small files:
    warm 1 process 16.7 s, 2 12.8 s, 4 14.0 s; cold 2 30.3 s, 4 31.9 s (bare -r 17.2 s warm, 47-51 s
    cold); 4,000 files cold, one process per batch: 1.89x bare where threads of ioctls were 1.2-1.4x.
    Each costs a process start (0.1 s there), so only a batch under 2 x PROC_MIN has one."""
    cores = cores or os.cpu_count() or 2
    return max(1, min(jobs, 4, cores, nfiles // PROC_MIN or 1))


class _Dir:
    """A directory of the run: its eligible files (scanned ahead), how far the batches got, its report."""

    __slots__ = ("d", "fut", "off", "rep")

    def __init__(self, d, fut) -> None:
        self.d, self.fut, self.off, self.rep = d, fut, 0, None

    @property
    def files(self) -> list:
        return self.fut.result()


FIRST_BATCH = 2048  # files: the first batch is small so the processes start while the scan goes on
BATCH_FILES = 32768  # files: a batch grows 4x each time up to this


def batches(r, workers: Executor, scanner: ThreadPoolExecutor, dirs: list, where):
    """Rewrite ``dirs`` for run ``r`` (engine._Run) batch by batch; yields (DirEntry, DirReport) for
    each directory, in order, once every file of it was answered (a directory larger than a batch
    spans several). Ends when the directories are done or a limit is hit (the directory begun then is
    yielded with its files left counted as deferred), or when the caller stops asking (the target)."""
    ahead: deque[_Dir] = deque()
    nxt = queued = 0  # queued: files (by the pre-scan's count) of the directories in ``ahead``
    cap = FIRST_BATCH
    try:
        while True:
            # keep the directories of this batch and the next submitted to the scanning thread
            while nxt < len(dirs) and (len(ahead) < 2 or queued < cap + min(4 * cap, BATCH_FILES)):
                d = dirs[nxt]
                ahead.append(_Dir(d, scanner.submit(eligible, r, d, *where(d))))
                queued += d.files
                nxt += 1
            if not ahead or r.limit_hit():
                break
            batch, grow_hit = _take(r, ahead, cap)
            for x, _a, _b in batch:
                queued -= x.d.files if x.off == 0 else 0
            yield from _run(r, workers, batch, ahead)
            cap = min(4 * cap, BATCH_FILES)
            if grow_hit:
                r.over_budget(grow_hit)  # sets the reason and the stop
        if ahead and ahead[0].rep is not None:  # begun, not ended: not done
            x = ahead.popleft()
            x.rep.deferred += len(x.files) - x.off
            yield x.d, x.rep
    finally:
        for x in ahead:
            x.fut.cancel()


def _caps(r) -> tuple[float, float]:
    """(allocated bytes, file bytes) a batch may take before the run must look again."""
    alloc = size = float(BATCH_BYTES)
    if not r.all:
        if r._near(r.opts.target_spread):
            alloc = 1.0  # near the target: one directory, then measure
        else:
            alloc = max(1.0, r.measure_every - (r.moved - r.moved_at_measure))
    if r.opts.max_bytes is not None:
        size = min(size, max(1.0, r.opts.max_bytes - r.report.bytes))
    if r.opts.max_rate:
        size = min(size, 2.0 * r.opts.max_rate)  # the throttle paces batch by batch
    return alloc, size


def _take(r, ahead: deque, cap_files: int) -> tuple[list, int]:
    """The next batch, [(_Dir, start, end)] in order: whole directories, but the last one may be cut
    (by the files, the command lines' length or the bytes a limit leaves; it goes on in the next
    batch). Its allocated bytes are checked at directory ends (the pool is measured between
    directories). Also the growth that ended it (--max-growth), or 0."""
    cap_alloc, cap_size = _caps(r)
    budget = None if r.opts.max_growth is None else r.opts.max_growth - r.growth
    batch: list = []
    n = argv = alloc = size = grow = 0
    for x in ahead:
        files = x.files
        i = x.off
        while i < len(files):
            name, st = files[i]
            g = st.st_blocks * 512 if r.pinned(st.st_mtime_ns) else 0
            if budget is not None and g and grow + g > budget:
                if i > x.off:
                    batch.append((x, x.off, i))
                return batch, g  # this file and the rest wait: over the growth budget
            cost = len(x.d.path) + len(name) + 10
            if n and (n >= cap_files or argv + cost > 4 * PROC_ARGV or size >= cap_size):
                if i > x.off:
                    batch.append((x, x.off, i))
                return batch, 0
            n, argv, grow = n + 1, argv + cost, grow + g
            alloc += st.st_blocks * 512 or st.st_size
            size += st.st_size
            i += 1
        batch.append((x, x.off, i))
        if n and (alloc >= cap_alloc or size >= cap_size or n >= cap_files):
            break
        if n and not r.all and r._near(r.opts.target_spread, alloc, tuple(y.d.path for y, _a, _b in batch)):
            break  # the model says the target is near once this batch is in: measure after it
    return batch, 0


def _run(r, workers: Executor, batch: list, ahead: deque):
    """Run one batch; yield (DirEntry, DirReport) for each directory it ended."""
    from .engine import DirReport

    paths = [os.path.join(x.d.path, name) for x, a, b in batch for name, _st in x.files[a:b]]
    r.copier.throttle.consume(sum(st.st_size for x, a, b in batch for _n, st in x.files[a:b]), r.stop)
    answers: dict[bytes, str | None] = {}  # None: rewritten; else why not
    lost: set[bytes] = set()  # not answered because the process was ended: not done, not failed
    k = procs_for(r.prep.jobs, len(paths))
    parts = _split(paths, k)

    def lane(i: int) -> list:  # k lanes at once, each running its parts one after the other
        return [(part, r.zfs.rewrite(part, r.prep.physical, r.stop) if not r.stop.is_set() else None)
                for part in parts[i::k]]

    for part, ans in (pa for done in workers.map(lane, range(k)) for pa in done):
        if ans is None or ans.returncode < 0:
            lost.update(part)
            if ans is None:
                continue
        answers.update(dict.fromkeys(ans.done))
        answers.update(ans.failed)
        for line in ans.other[:3]:
            r.events.note(f"zfs rewrite: {line}")
        if ans.returncode > 0 and not ans.done and not ans.failed:
            # the command failed as a whole (no file named either way): the run fails, and no
            # directory of this batch is recorded done (it would be passed over on a resume)
            from ..errors import CommandFailed

            raise CommandFailed(("zfs", "rewrite"), ans.returncode, "\n".join(ans.other) or "no output")
    it = iter(paths)
    for x, a, b in batch:
        rep = x.rep = x.rep or DirReport(x.d.path)
        for _name, st in x.files[a:b]:
            p = next(it)
            if p in answers:
                why = answers[p]
                if why is None:
                    _tally(r, rep, st)
                    if r.pinned(st.st_mtime_ns):
                        r.growth += st.st_blocks * 512
                    continue
                why = GONE if why == "No such file or directory" else f"zfs rewrite failed ({why})"
            elif p in lost:
                rep.deferred += 1  # ended before its turn (a stop): the directory is not done
                continue
            else:  # no longer a regular file: zfs rewrite passes over those without a word
                why = GONE
            rep.skipped[why] = rep.skipped.get(why, 0) + 1
        x.off = b
        if b == len(x.files) and ahead and ahead[0] is x:
            ahead.popleft()
            yield x.d, rep


def _split(paths: list[bytes], k: int) -> list[list[bytes]]:
    """``paths`` in ``k`` or more contiguous parts, each within PROC_FILES and PROC_ARGV."""
    parts: list[list[bytes]] = []
    per = -(-len(paths) // k)
    cur: list[bytes] = []
    size = 0
    for p in paths:
        if cur and (len(cur) >= min(per, PROC_FILES) or size + len(p) + 9 > PROC_ARGV):
            parts.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += len(p) + 9  # the string, its NUL and its pointer
    if cur:
        parts.append(cur)
    return parts


def _tally(r, rep, st) -> None:
    rep.files += 1
    rep.bytes += st.st_size
    r.report.files += 1
    r.report.bytes += st.st_size
    r.moved += st.st_blocks * 512 or st.st_size
