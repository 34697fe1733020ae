"""The directories of a `zfs rewrite` rebalance (method rewrite): every eligible file rewritten in
place by `zfs rewrite -v [-P]` processes, each handed thousands of paths from several directories.

Why the command and not rebal's own loop: the kernel does the same work either way, and a loop of
open/ioctl/close in Python is dearer per file than the command's loop in C; a process per directory
or per few hundred paths would cost more than the rewrite of small files.
In place, same inode: names, times and links do not change and a crash leaves each file either
rewritten or not with the same content, so nothing needs a journal entry before it; the caller
records each directory done once every file of it was answered.

A pipeline: one thread scans the directories ahead; the paths are cut into parts of up to
PROC_FILES files in the run's order; ``k`` lanes each run one `zfs rewrite` process at a time and
take the next part as soon as theirs ends, so no lane waits for another (the batches of a first
version waited for their slowest process and for the scan of their whole batch: at 4,000 files
that was a third of the run). A part takes what is scanned (the pre-scan's listing of the first
directories is taken as it is, so the first parts start at once): the files left when every lane
was idle / k each, later ones the files left / k, so the lanes end together.

A *window* is what may go before the pool is looked at again: its bytes are cut by the pool's next
measurement (64 MiB, or pool/200) without `--all`, by one directory where the model says the target
is near, by what `--max-bytes` leaves, by two seconds of `--max-rate` and by the `--max-growth`
budget (per file). At a window's end the lanes drain; directories are handed back, in order, as
they are answered. `-v` names each file rewritten; a stop (Ctrl-C, SIGTERM, --until) ends the
processes at once and what they named counts.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING
from collections import deque
from collections.abc import Callable
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    InvalidStateError,
    wait,
)

from .planner import DirEntry
from .runstate import DirReport, Run
from .scan import AHEAD

if TYPE_CHECKING:
    from ..zfs.host_fs import RewriteAnswer

Where = Callable[[DirEntry], tuple[bytes, int]]  # a directory's target root and its device

PROC_FILES = 16384  # paths per `zfs rewrite` process (PROC_ARGV is what usually binds)
PROC_ARGV = 1 << 20  # bytes of paths per process: under ARG_MAX (2 MiB with the usual 8 MiB stack)
PROC_MIN = 512  # files: a part waits for the scan until it has this many (or the scan has ended)
WINDOW_BYTES = 4 << 30  # a window at most this much data, so the limits and progress are seen often
PROGRESS_EVERY = 1.0  # seconds: how often a run whose parts are running tells how far they are
SCAN_AHEAD = AHEAD  # files scanned and not yet handed to a lane, at most (about 250 bytes each)
GONE = "gone or replaced since the scan"


def eligible(r: Run, d: DirEntry, root: bytes, dev: int) -> list:
    """(name, lstat) of the files of directory ``d`` to rewrite. Runs on one scanning thread ahead
    of the rewrite (the hardlink set is only ever touched here, in directory order). The first
    directories were listed by the run's pre-scan moments before (the same `candidates`, the same
    filters): their listing is taken as it is. A file gone or replaced since is answered so by
    `zfs rewrite` (GONE), as one changed after this scan is; in place, content never changes."""
    from .scan import candidates

    listed = r.prep.scan.listings.pop(d.path, None)
    if listed is not None and not any(st.st_nlink > 1 for _n, st in listed):
        return listed  # (the usual case: no file with several names, nothing to pass over)
    files = []
    for n, st in (listed if listed is not None else candidates(d.path, root, dev, r.filters, hardlinks_ok=True)):
        if st.st_nlink > 1:  # an inode with several names is rewritten once
            if st.st_ino in r.linked_seen:
                continue
            r.linked_seen.add(st.st_ino)
        files.append((n, st))
    return files


def procs_for(jobs: int, nfiles: int, cores: int | None = None) -> int:
    """How many `zfs rewrite` processes run at once: no more than the cores (the kernel's rewrite
    of cached data is CPU work), at most 4. Measured on OpenZFS 2.4.4, 2 vCPUs, 40,000 small files:
    warm 1 process 16.7 s, 2 12.8 s, 4 14.0 s; cold 2 30.3 s, 4 31.9 s (bare -r 17.2 s warm, 47-51 s
    cold); 4,000 files warm: 1 process 2.7-2.8 s, 2 2.3-2.6 s, 4 2.5 s (bare -r 2.8-2.9 s). Each
    costs a process start, so only a run under 2 x PROC_MIN files has one."""
    cores = cores or os.cpu_count() or 2
    return max(1, min(jobs, 4, cores, nfiles // PROC_MIN or 1))


class _Dir:
    """A directory of the run: its eligible files (scanned ahead), how many were handed to a lane,
    how many parts holding some of them are running, its report."""

    __slots__ = ("d", "fut", "off", "running", "rep")

    def __init__(self, d: DirEntry, fut: Future[list]) -> None:
        self.d, self.fut, self.off, self.running, self.rep = d, fut, 0, 0, None

    @property
    def files(self) -> list:
        return self.fut.result()


class _StopOrHalt:
    """The run's stop, or the pipeline's own halt (the caller stopped asking, or a failure): either
    ends the processes. Setting it sets the run's stop."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop, self.halt = stop, threading.Event()

    def is_set(self) -> bool:
        return self.stop.is_set() or self.halt.is_set()

    def set(self) -> None:
        self.stop.set()


def batches(r: Run, workers: Executor, scanner: Executor, dirs: list[DirEntry], where: Where) -> Batches:
    """Rewrite ``dirs`` for run ``r`` (runstate.Run); yields (DirEntry, DirReport) for each directory,
    in order, once every file of it was answered. Ends when the directories are done or a limit is
    hit (the directory begun then is yielded with its files left counted as deferred). When the
    caller has what it wanted (the target), `rest()` ends the processes still running and gives
    the directories begun; `close()` ends them and gives nothing."""
    return Batches(_Pipeline(r, workers, scanner, dirs, where))


class Batches:
    def __init__(self, p: "_Pipeline") -> None:
        self.p, self._it = p, p.run()

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> tuple[DirEntry, DirReport]:
        return next(self._it)

    def rest(self) -> list:
        """(DirEntry, DirReport) of every directory begun and not yet given, in order: the processes
        still running are ended and what they named is counted; a directory some of whose files
        were not answered (or not handed) has them counted as deferred (it is not done). A window
        of the model's size answers many directories at once: those the run stops after are
        rewritten, and recorded so (else the next run would rewrite them again)."""
        self._it.close()
        try:
            return self.p.rest()
        finally:
            self.p.close()

    def close(self) -> None:
        self._it.close()
        self.p.close()


class _Pipeline:
    def __init__(self, r: Run, workers: Executor, scanner: Executor, dirs: list[DirEntry], where: Where) -> None:
        self.r, self.workers, self.scanner, self.dirs, self.where = r, workers, scanner, dirs, where
        self.left = sum(d.files for d in dirs)  # files not yet handed (by the pre-scan's count)
        self.k = procs_for(r.prep.jobs, self.left)
        self.ahead: deque[_Dir] = deque()  # submitted to the scanner, not yet handed back
        self.cut = 0  # index in ``ahead`` of the directory being cut into parts
        self.nxt = 0  # next of ``dirs`` to submit to the scanner
        self.unhanded = 0  # files (pre-scan's count) of submitted directories not yet handed
        self.running: dict = {}  # future -> [(_Dir, start, end)] of a part
        self.sc = 0  # index in ``ahead`` before which every directory is scanned
        self.stop = _StopOrHalt(r.stop)
        self.named: dict = {}  # future -> [files named so far by `-v`, file sizes in the order handed]
        self.told = time.monotonic()  # when progress was last reported
        self.began: Future = Future()  # done once a process has named its first files: told at once
        self.told_began = False

    # -- the loop --------------------------------------------------------------------------------

    def run(self):
        r = self.r
        while True:
            self._scan_ahead()
            if r.limit_hit() or (self.cut >= len(self.ahead) and self.nxt >= len(self.dirs)):
                break
            grow_hit = yield from self._window()
            if grow_hit:
                r.over_budget(grow_hit)  # sets the reason and the stop
        yield from self._answered()
        self._progress(force=True)
        if self.ahead and self.ahead[0].rep is not None and not self.ahead[0].running:
            x = self.ahead.popleft()  # begun, not ended (a limit): not done
            x.rep.deferred += len(x.files) - x.off
            yield x.d, x.rep

    def _window(self):
        """Hand out parts until the window's bytes are used; yield directories as they are answered;
        return once the lanes have drained, with the growth that ended the window (--max-growth) or 0."""
        r = self.r
        cap_alloc, cap_size, by_model = _caps(r)
        budget = None if r.opts.max_growth is None else r.opts.max_growth - r.growth
        w = {"alloc": 0, "size": 0, "grow": 0, "dirs": [], "closed": False, "grow_hit": 0, "by_model": by_model}
        while True:
            # lanes all idle (a window's start): the files left are shared out among them as they
            # stand now, not again after each part (4,000 files, 2 lanes: 2,000 + 2,000, not
            # 2,000 + 1,000 + 512 + 488, four process starts and a lane idle at the end)
            share = self.left if not self.running else None
            while (not w["closed"] and len(self.running) < self.k and not self.stop.is_set()
                   and not r.limit_hit()):
                part = self._part(w, cap_alloc, cap_size, budget, block=not self.running, share=share)
                if part is None:
                    break
                self._start(part)
            if not self.running:
                return w["grow_hit"]
            waiting = list(self.running)
            if not w["closed"] and len(self.running) < self.k:
                scanning = self._scanning()
                if scanning is not None:
                    waiting.append(scanning)  # a lane waits for the scan: wake when it moves on
            if not self.told_began:
                waiting.append(self.began)
            done, _ = wait(waiting, timeout=PROGRESS_EVERY, return_when=FIRST_COMPLETED)
            for f in done:
                if f in self.running:
                    self._answer(self.running.pop(f), f.result())
                    self.named.pop(f, None)
            yield from self._answered()
            self._progress()
            self._scan_ahead()

    def _progress(self, force: bool = False) -> None:
        """Files and bytes rewritten so far, the parts still running counted as far as `-v` has
        named their files: told as the first files are named (the rewrite has begun), then at most
        every PROGRESS_EVERY seconds (a part runs for many)."""
        now = time.monotonic()
        began = not self.told_began and self.began.done()
        if now - self.told < PROGRESS_EVERY and not force and not began:
            return
        self.told, self.told_began = now, self.told_began or began
        r = self.r
        files, nbytes = r.report.files, r.report.bytes
        for n, sizes in list(self.named.values()):
            n = min(n[0], len(sizes))
            files += n
            nbytes += sum(sizes[:n])
        r.events.progress(files, nbytes)

    def _part(self, w: dict, cap_alloc: float, cap_size: float, budget: int | None, block: bool,
              share: int | None = None) -> list | None:
        """The next part, [(_Dir, start, end)] in order, from what is scanned; None when there is
        none to start now (the window is closed, every directory is handed, or the scan is behind
        while a part runs). Closes the window where its bytes are used. A part of empty directories
        only holds no file: it is answered at once."""
        r = self.r
        target = max(PROC_MIN, min(PROC_FILES, -(-(self.left if share is None else share) // self.k)))
        if not block and self._scanned(min(PROC_MIN, target)) < min(PROC_MIN, target):
            return None  # a part runs: wait for the scan rather than start a small process
        part: list = []
        n = argv = 0
        while True:
            if self.cut >= len(self.ahead):
                if self.nxt >= len(self.dirs):
                    w["closed"] = True  # every directory is handed out
                    break
                self._scan_ahead(force=True)
            x = self.ahead[self.cut]
            if part and not x.fut.done() and n >= (PROC_MIN if block else 0):
                break  # take what is scanned
            files = x.files
            i, full = x.off, False
            # the window's sums in locals, written back below (this loop runs once per file)
            grow, alloc, size, pinned_ns, head = w["grow"], w["alloc"], w["size"], r.pinned_ns, len(x.d.path) + 10
            while i < len(files):
                name, st = files[i]
                g = st.st_blocks * 512 if pinned_ns is not None and st.st_mtime_ns < pinned_ns else 0  # (r.pinned)
                if budget is not None and g and grow + g > budget:
                    w["closed"], w["grow_hit"] = True, g  # this file and the rest wait: over the growth budget
                    break
                cost = head + len(name)
                if n >= target or argv + cost > PROC_ARGV:
                    full = True
                    break
                n, argv = n + 1, argv + cost
                grow += g
                alloc += st.st_blocks * 512 or st.st_size
                size += st.st_size
                i += 1
                if size >= cap_size:
                    w["closed"] = True
                    break
            w["grow"], w["alloc"], w["size"] = grow, alloc, size
            self._took(part, x, i)
            if i < len(files):
                break  # the part is full, or the window closed inside this directory
            self.cut += 1
            w["dirs"].append(x.d.path)
            if w["closed"]:
                break
            if w["alloc"] >= cap_alloc or (not r.all and not w["by_model"]
                                           and r.near(r.opts.target_spread, w["alloc"], tuple(w["dirs"]))):
                w["closed"] = True  # measure after this directory (the model says the target is near)
                break
            if full:
                break
        return part or None

    def _scanned(self, enough: int) -> int:
        """Files scanned and not yet handed, from the cut on (counted up to ``enough``); ``enough``
        when every directory left is scanned."""
        n = 0
        for j in range(self.cut, len(self.ahead)):
            x = self.ahead[j]
            if not x.fut.done():
                return n
            n += len(x.files) - x.off
            if n >= enough:
                return n
        return n if self.nxt < len(self.dirs) else enough

    def _scanning(self):
        """The scan of the first directory not yet scanned, or None."""
        while self.sc < len(self.ahead) and self.ahead[self.sc].fut.done():
            self.sc += 1
        return self.ahead[self.sc].fut if self.sc < len(self.ahead) else None

    def _took(self, part: list, x: _Dir, end: int) -> None:
        """Add x's files from its offset to ``end`` to the part (an empty directory, once, as it is)."""
        if end > x.off or end == len(x.files) == 0:  # (the cut moves past a directory once handed)
            part.append((x, x.off, end))
            self.left -= end - x.off
            if x.off == 0:
                self.unhanded -= x.d.files
            x.off = end

    def _start(self, part: list) -> None:
        r = self.r
        paths: list[bytes] = []
        sts: list = []
        for x, a, b in part:
            head = x.d.path if x.d.path.endswith(b"/") else x.d.path + b"/"  # (os.path.join per file: 4,000 calls)
            for name, st in x.files[a:b]:
                paths.append(head + name)
                sts.append(st)
        # handed in inode order: files made one after the other have their dnodes and blocks together
        # (4,000 small files, 2 processes: 2.3 s in inode order, 3.2-3.5 s in directory order)
        order = sorted(range(len(paths)), key=[st.st_ino for st in sts].__getitem__)
        handed = [paths[i] for i in order]
        sizes = [sts[i].st_size for i in order]
        r.throttle.consume(sum(sizes), r.stop)
        for x, _a, _b in part:
            x.running += 1
        if not paths:  # empty directories only
            self._answer(part, None)
            return
        named = [0]

        def feed(chunk: bytes) -> None:  # on the lane's thread: a line a file rewritten
            named[0] += chunk.count(b"\n")
            if not self.began.done():
                try:
                    self.began.set_result(None)
                except InvalidStateError:  # the other lane's first files, at the same moment
                    pass

        fut = self.workers.submit(lambda: (paths, r.host.rewrite(handed, r.prep.physical, self.stop, on_out=feed)
                                           if not self.stop.is_set() else None))
        self.running[fut] = part
        self.named[fut] = (named, sizes)

    # -- answers ---------------------------------------------------------------------------------

    def _answer(self, part: list, result: tuple[list[bytes], RewriteAnswer] | None) -> None:
        """Count a part's answer into its directories' reports."""

        r = self.r
        paths, ans = result if result is not None else ([], None)
        answers: dict[bytes, str | None] = {}  # None: rewritten; else why not
        lost = ans is None or ans.returncode < 0  # ended by a stop: what it did not name is not done
        if ans is not None:
            answers.update(dict.fromkeys(ans.done))
            answers.update(ans.failed)
            for line in ans.other[:3]:
                r.events.note(f"zfs rewrite: {line}")
            if ans.returncode > 0 and not ans.done and not ans.failed:
                # the command failed as a whole (no file named either way): the run fails, and no
                # directory of this part is recorded done (it would be passed over on a resume)
                from ..errors import CommandFailed

                raise CommandFailed(("zfs", "rewrite"), ans.returncode, "\n".join(ans.other) or "no output")
        it = iter(paths)
        pinned_ns = r.pinned_ns
        for x, a, b in part:
            x.running -= 1
            rep = x.rep = x.rep or DirReport(x.d.path)
            files = nbytes = moved = 0  # rewritten: added to the reports once per directory (_tally)
            for _name, st in x.files[a:b]:
                p = next(it)
                if p in answers:
                    why = answers[p]
                    if why is None:
                        files += 1
                        nbytes += st.st_size
                        moved += st.st_blocks * 512 or st.st_size
                        if pinned_ns is not None and st.st_mtime_ns < pinned_ns:  # (r.pinned)
                            r.growth += st.st_blocks * 512
                        continue
                    why = GONE if why == "No such file or directory" else f"zfs rewrite failed ({why})"
                elif lost:
                    rep.deferred += 1  # ended before its turn (a stop): the directory is not done
                    continue
                else:  # no longer a regular file: zfs rewrite passes over those without a word
                    why = GONE
                rep.skipped[why] = rep.skipped.get(why, 0) + 1
            _tally(r, rep, files, nbytes, moved)

    def _answered(self):
        """The directories at the head, every file of them handed and answered, in order."""
        while self.ahead and self.cut > 0:
            x = self.ahead[0]
            if x.running or x.rep is None or x.off < len(x.files):
                return
            self.ahead.popleft()
            self.cut -= 1
            self.sc = max(0, self.sc - 1)
            yield x.d, x.rep

    # -- the scan ahead ----------------------------------------------------------------------------

    def _scan_ahead(self, force: bool = False) -> None:
        while self.nxt < len(self.dirs) and (force or len(self.ahead) - self.cut < 2 or self.unhanded < SCAN_AHEAD):
            d = self.dirs[self.nxt]
            if d.path in self.r.prep.scan.listings and self._scanning() is None:
                fut: Future = Future()  # listed by the pre-scan, nothing before it pending: at once, here
                fut.set_result(eligible(self.r, d, *self.where(d)))
            else:
                fut = self.scanner.submit(eligible, self.r, d, *self.where(d))
            self.ahead.append(_Dir(d, fut))
            self.unhanded += d.files
            self.nxt += 1
            force = False

    def rest(self) -> list:
        self.stop.halt.set()
        while self.running:
            done, _ = wait(list(self.running), return_when=FIRST_COMPLETED)
            for f in done:
                self._answer(self.running.pop(f), f.result())
                self.named.pop(f, None)
        out = list(self._answered())
        for x in list(self.ahead)[:self.cut + 1]:
            if x.rep is None:
                break  # not begun
            x.rep.deferred += len(x.files) - x.off
            out.append((x.d, x.rep))
        return out

    def close(self) -> None:
        """End what still runs (the caller stopped asking, or a failure) and wait for it."""
        self.stop.halt.set()
        if self.running:
            wait(list(self.running))
        for x in self.ahead:
            x.fut.cancel()


def _caps(r: Run) -> tuple[float, float, bool]:
    """(allocated bytes, file bytes) a window may take before the run must look again, and whether
    the model sized it (then the window is not closed early as the target nears)."""
    alloc = size = float(WINDOW_BYTES)
    need = None
    if not r.all:
        need = r.bytes_to_go()
        if need is not None:  # what the model, shifted to the last settled measurement, says is left: one
            alloc = max(1.0, float(need))  # window, then the pool is settled and measured (a few windows, not one a directory)
        elif r.near(r.opts.target_spread):
            alloc = 1.0  # near the target: one directory, then measure
        else:
            alloc = max(1.0, r.measure_every - (r.moved - r.moved_at_measure))
    window = r.steer_window()
    if window is not None:  # steered: the vdevs it fills are looked at again before they can pass it
        alloc = max(1.0, min(alloc, float(window)))
    if r.opts.max_bytes is not None:
        size = min(size, max(1.0, r.opts.max_bytes - r.report.bytes))
    if r.opts.max_rate:
        size = min(size, 2.0 * r.opts.max_rate)  # the throttle paces window by window
    return alloc, size, need is not None


def _tally(r: Run, rep: DirReport, files: int, nbytes: int, moved: int) -> None:
    rep.files += files
    rep.bytes += nbytes
    r.report.files += files
    r.report.bytes += nbytes
    r.moved += moved
