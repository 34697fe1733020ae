"""One directory of a `zfs rewrite` rebalance (method rewrite): every eligible file rewritten in place,
by the ioctl from a pool of threads (inplace.py) where the file system takes it, else by `zfs
rewrite` command lines of up to 256 paths. In place: no temp names, no renames, directory times
untouched, so no journal entry need precede it; the caller records the directory done afterwards."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from . import inplace, rewrite

EMPTY = object()  # an empty file: nothing to rewrite, and no answer from the ioctl
CHUNK = 256  # files between two checks of the limits (stop, --max-bytes, --until, --max-growth)


def eligible(r, d, root: bytes, dev: int) -> list:
    """(name, lstat) of the files of directory ``d`` to rewrite. The run scans the next directory
    with this while the pool's threads rewrite the current one (one thread: the hardlink set is
    only ever touched here, in directory order)."""
    from .scan import candidates

    files = []
    for n, st in candidates(d.path, root, dev, r.filters, hardlinks_ok=True):
        if st.st_nlink > 1:  # an inode with several names is rewritten once
            if st.st_ino in r.linked_seen:
                continue
            r.linked_seen.add(st.st_ino)
        files.append((n, st))
    return files


def rewrite_dir(r, pool: ThreadPoolExecutor, d, files: list):
    """Rewrite the ``files`` (from `eligible`) of directory ``d`` for run ``r`` (engine._Run);
    returns its DirReport."""
    from .engine import DirReport

    rep = DirReport(d.path)
    if r.ioctl:
        try:
            return _by_ioctl(r, pool, d, files, rep)
        except inplace.Unsupported as e:
            r.ioctl = False
            r.events.note(f"the rewrite ioctl is refused here ({e}): rewriting with `zfs rewrite` command lines")
    return _by_command(r, d, files, rep)


def _tally(r, rep, st) -> None:
    rep.files += 1
    rep.bytes += st.st_size
    r.report.files += 1
    r.report.bytes += st.st_size
    r.moved += st.st_blocks * 512 or st.st_size


def _by_ioctl(r, pool, d, files, rep):
    physical = r.prep.physical
    dfd = os.open(d.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def one(item):
        name, st = item
        try:
            # an empty file is "done" without an ioctl: it proves nothing about the ioctl
            return None if inplace.rewrite_file(dfd, name, st.st_ino, physical) else EMPTY
        except inplace.Unsupported as e:
            return e
        except FileNotFoundError:
            return "gone or replaced since the scan"
        except OSError as e:
            return f"zfs rewrite failed ({e.strerror})"

    try:
        started = False
        for i in range(0, len(files), CHUNK):
            if r.limit_hit():
                break
            chunk = files[i:i + CHUNK]
            grow = sum(st.st_blocks * 512 for _n, st in chunk if r.pinned(st.st_mtime_ns))
            if grow and r.over_budget(grow):  # a whole chunk, or none of it
                break
            r.copier.throttle.consume(sum(st.st_size for _n, st in chunk), r.stop)
            # one task per worker, each every n-th file of the chunk: a future per file cost more
            # than the ioctl of a small file (the per-file overhead issue 19 measured)
            n = max(1, min(r.prep.jobs, len(chunk)))
            results: list = [None] * len(chunk)

            def part(k: int, chunk=chunk, results=results, n=n) -> None:
                for j in range(k, len(chunk), n):
                    results[j] = one(chunk[j])

            list(pool.map(part, range(n)))
            for (name, st), res in zip(chunk, results):
                if isinstance(res, inplace.Unsupported):
                    if not started:
                        raise res  # the first file tells: this file system has no ioctl
                    res = f"zfs rewrite failed ({res})"
                if res is None or res is EMPTY:
                    started = started or res is None
                    _tally(r, rep, st)
                else:
                    rep.skipped[res] = rep.skipped.get(res, 0) + 1
            r.growth += grow
        return rep
    finally:
        os.close(dfd)


def _by_command(r, d, files, rep):
    from ..errors import CommandFailed

    stats = {os.path.join(d.path, n): st for n, st in files}
    pinned = {p: st.st_blocks * 512 for p, st in stats.items() if r.pinned(st.st_mtime_ns)}
    for argv in rewrite.argv_batches(list(stats), r.prep.physical):
        if r.limit_hit():
            break
        grow = sum(pinned.get(os.fsencode(p), 0) for p in argv[2:])
        if grow and r.over_budget(grow):  # a whole batch, or none of it
            break
        try:
            r.zfs.run_rewrite(argv)
        except CommandFailed as e:
            rep.skipped["zfs rewrite failed"] = rep.skipped.get("zfs rewrite failed", 0) + len(argv) - 2
            r.events.note(str(e))
            continue
        for p in argv[2:]:
            if p.startswith("/"):
                _tally(r, rep, stats[os.fsencode(p)])
        r.growth += grow
    return rep
