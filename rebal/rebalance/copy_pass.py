"""One directory of a copy-verify-swap rebalance (method copy): its eligible files in batches, each
file's journal row written before its copy starts (journal.py), the copies made by a pool of
threads (copier.py), two batches in flight so that no worker waits for the last file of a batch.

Durability per batch on OpenZFS (durable.py): the copies of a batch are made and verified without
an fsync each, one barrier makes them all durable, then they are swapped. Elsewhere each copy is
fsynced before its swap. Either way the batch's renames are made durable before the journal drops
its rows."""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from ..units import human
from . import durable, journal
from .copier import Prepared
from .files import (
    DEFER_MAX_BYTES,
    DEFER_RESERVE,
    FileRef,
    FileOutcome,
    Result,
    restat,
    restore_times,
)
from .prepare import _avail
from .planner import DirEntry
from .runstate import DirReport, Run
from .scan import candidates

BATCH_FILES = 64
BATCH_BYTES = 256 << 20
WINDOW = 2  # batches in flight at once
LEASE_POLL = 0.2  # seconds between two looks at the leases of copies waiting for their batch's barrier
RETRIES = 2  # a file that changed while copied is tried again this often in the same run
# files this run's limits leave for a later run: not failures, and their directory is not done


def copy_dir(r: Run, pool: ThreadPoolExecutor, d: DirEntry, root: bytes, dev: int) -> DirReport:
    """Copy-verify-swap directory ``d`` for run ``r`` (runstate.Run); returns its DirReport."""

    rep = DirReport(d.path)
    try:
        dfd = os.open(d.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        rep.skipped[f"directory unreadable ({e.strerror})"] = d.files
        return rep
    try:
        dst = os.fstat(dfd)
        journal.start_dir(r.conn, r.report.run_id, d.path, dst)
        r.enter_dir(d)
        barrier = durable.Barrier(dfd)
        batched = durable.per_batch(barrier)
        work = (lambda dfd_, f: r.copier.prepare(dfd_, f, fsync=False)) if batched else r.copier.copy
        todo = [FileRef.from_stat(d.path, n, st) for n, st in candidates(d.path, root, dev, r.filters)]
        for attempt in range(RETRIES + 1):
            retry: list[FileRef] = []
            # Two batches in flight: the workers start on the next batch while the last files of
            # the one before finish (no idle barrier per batch). Each file's journal row is
            # written before its copy starts, as before; the limits count what is in flight.
            window: deque = deque()
            while todo or window:
                while todo and len(window) < WINDOW and not r.limit_hit():
                    batch, todo = take_batch(r, todo, rep)
                    if not batch:
                        if window:  # nothing fits while the batch in flight holds room: wait for it
                            break
                        if todo and not r.stop.is_set():  # nothing more fits under --max-bytes
                            r.stop_reason = f"--max-bytes reached ({human(r.report.bytes)} rewritten)"
                            r.stop.set()
                        break
                    ids = journal.begin_batch(r.conn, r.report.run_id, batch)
                    r.pending_size += sum(f.size for f in batch)
                    r.pending_grow += sum(f.alloc for f in batch if r.pinned(f.mtime_ns))
                    window.append((batch, ids, [pool.submit(work, dfd, f) for f in batch]))
                if not window:
                    if r.limit_hit() or r.stop.is_set():
                        return rep
                    continue
                batch, ids, futures = window.popleft()
                r.pending_size -= sum(f.size for f in batch)
                r.pending_grow -= sum(f.alloc for f in batch if r.pinned(f.mtime_ns))
                results = collect(r, futures)
                if batched:
                    results = swap_batch(r, barrier, results)
                barrier.renames()
                finish(r, dfd, rep, batch, ids, results, attempt, retry)
                if not rep.cut and r.reached_in_dir():  # the target, inside the directory: the batch
                    rep.cut, todo = True, []  # in flight is finished, no other is started
            if rep.cut or r.limit_hit():
                return rep
            todo = retry
            if not todo:
                break
        return rep
    finally:
        restore_times(dfd, dst)
        os.close(dfd)


def collect(r: Run, futures: list[Future[Result | Prepared]]) -> list:
    """The batch's outcomes (Results, or Prepared copies awaiting the barrier). While the batch is
    being made, a prepared original whose lease a writer broke is let go at once (within
    LEASE_POLL), so the writer's open(2), which waits on the lease, is not held up until the barrier.
    If a worker raised (no per-file problem does: only a bug or MemoryError), the prepared copies
    collected so far are dropped before the error goes on; copies still being made then are left to
    the journal's recovery, which names them."""
    out: list = [None] * len(futures)
    pending = set(range(len(futures)))
    try:
        while pending:
            wait([futures[i] for i in pending], timeout=LEASE_POLL, return_when=FIRST_COMPLETED)
            for i in [i for i in pending if futures[i].done()]:
                out[i] = futures[i].result()
                pending.discard(i)
            for i, x in enumerate(out):
                if isinstance(x, Prepared) and x.leased and not r.copier.lease_held(x.src):
                    r.copier.drop(x)
                    out[i] = Result(FileOutcome.IN_USE, x.written, "opened for writing while its batch was made durable",
                                    x.copy_ino)
        return out
    except BaseException:
        for x in out:
            if isinstance(x, Prepared):
                r.copier.drop(x)
        raise


def swap_batch(r: Run, barrier: durable.Barrier, results: list) -> list[Result]:
    """One barrier for the batch's prepared copies, then their swaps, on the run's second pool of
    threads (a few metadata calls each; the first pool copies the next batch meanwhile). If the
    barrier fails, no copy of the batch is swapped: each is dropped and counted failed, its
    original untouched."""
    prepared = [x for x in results if isinstance(x, Prepared)]
    if not prepared:
        return results
    pmap = r.swap_pool.map if r.swap_pool is not None else map
    try:
        barrier.copies([p.tmp for p in prepared], pmap)
    except OSError as e:
        why = f"the batch's copies could not be made durable ({e.strerror})"
        for p in prepared:
            r.copier.drop(p)
        return [Result(FileOutcome.FAILED, x.written, why, x.copy_ino) if isinstance(x, Prepared) else x for x in results]
    swapped = iter(list(pmap(r.copier.swap, prepared)))
    return [next(swapped) if isinstance(x, Prepared) else x for x in results]


def finish(r: Run, dfd: int, rep: DirReport, batch: list[FileRef], ids: list[int], results: list[Result], attempt: int,
           retry: list[FileRef]) -> None:
    """Count a batch's outcomes, queue the files that changed meanwhile, write its journal rows."""
    outcomes = []
    for jid, ref, res in zip(ids, batch, results):
        outcomes.append((jid, res.outcome.value, res.reason, res.copy_ino))
        r.events.file_done(ref, res)
        if res.outcome is FileOutcome.SWAPPED:
            rep.files += 1
            rep.bytes += ref.size
            if r.pinned(ref.mtime_ns):
                r.growth += ref.alloc
            r.report.files += 1
            r.report.bytes += ref.size
            r.moved += ref.alloc or ref.size
        elif res.outcome is FileOutcome.CHANGED and attempt < RETRIES:
            fresh = restat(dfd, ref)
            if fresh:
                retry.append(fresh)
        else:
            key = res.outcome.value
            rep.skipped[key] = rep.skipped.get(key, 0) + 1
            if res.outcome is FileOutcome.NOSPACE:
                r.stop_reason = f"the pool is full (ENOSPC copying {os.fsdecode(ref.path)})"
                r.stop.set()
    journal.finish_batch(r.conn, outcomes)


def take_batch(r: Run, todo: list[FileRef], rep: DirReport) -> tuple[list[FileRef], list[FileRef]]:
    """The next files to copy at once, as many as fit above the free-space reserve and under the limits,
    counting the batch in flight. Empty with files left: wait for the batch in flight (if any), else
    a limit is reached (the stop reason says which) or every file left is deferred."""
    room = _avail(todo[0].dir) - r.reserve - r.pending_size  # copies in flight take room too
    done = r.report.bytes + r.pending_size
    # near the target, no more than the model says is left to move (less what is in flight): the run
    # then stops within a batch of the target, not a window of two whole batches past it
    need = r.need_here()
    if need is not None and need <= r.pending_size and r.pending_size:
        return [], list(todo)  # what is in flight may be enough: measure after it
    budget = BATCH_BYTES if need is None else min(BATCH_BYTES, need - r.pending_size)
    batch: list[FileRef] = []
    size = grow = 0
    rest: list[FileRef] = []
    for i, ref in enumerate(todo):
        if len(batch) >= BATCH_FILES or (batch and size >= budget):
            rest.extend(todo[i:])
            break
        if r.pinned(ref.mtime_ns):
            if r.over_budget(r.pending_grow + grow + ref.alloc):
                rest.extend(todo[i:])
                break
            grow += ref.alloc
        if r.opts.max_bytes is not None and done + size + ref.size > r.opts.max_bytes:
            if not batch and done == 0 and ref.size > r.opts.max_bytes:
                rep.skipped[DEFER_MAX_BYTES] = rep.skipped.get(DEFER_MAX_BYTES, 0) + 1
                rep.deferred += 1
                continue
            rest.extend(todo[i:])
            break
        if size + ref.size > room:
            if r.pending_size:  # the copies in flight free their originals' room once swapped: wait
                rest.extend(todo[i:])
                break
            if room <= 0:
                r.stop_reason = f"free space reached the reserve ({human(r.reserve)})"
                r.stop.set()
                rest.extend(todo[i:])
                break
            if ref.size > room:
                rep.skipped[DEFER_RESERVE] = rep.skipped.get(DEFER_RESERVE, 0) + 1
                rep.deferred += 1
                continue
            rest.extend(todo[i:])
            break
        batch.append(ref)
        size += ref.size
    return batch, rest

