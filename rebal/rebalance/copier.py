"""Copy-verify-swap of one regular file, so that ZFS writes its blocks anew.

At every instant the file's name holds a complete file:
1. the original is opened (O_NOFOLLOW, O_NOATIME) and checked against what the scan saw; a read lease
   is taken where the platform allows, so a file open for writing is skipped and a writer that opens
   it meanwhile breaks the lease, which makes the copy be dropped;
2. the data is copied by plain read(2)/write(2) into a hidden temp file in the same directory (never
   copy_file_range, sendfile or a reflink: block cloning would move nothing); holes are kept; a hash
   of what was read is kept;
3. owner, mode, xattrs (POSIX ACLs included) and atime/mtime in ns are restored, the copy is fsynced
   and verified against the hash by reading it back (or by size and samples, as configured);
4. the original is checked unchanged (inode, size, mtime_ns, ctime_ns, the lease) and the copy is
   renamed over it. The original keeps a second hidden name until a last lease check after the
   rename: if a writer opened the original in that instant, the original is put back.

The temp names are short (from the inode number), so a 255-byte file name works. Recovery after a
crash only ever removes a temp name: see `journal.recover`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

import xxhash

from ..throttle import Throttle
from . import attrs

F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
F_GETLEASE = getattr(fcntl, "F_GETLEASE", 1025)
LEASE_CHECK_BYTES = 16 << 20


from .files import (  # noqa: F401
    FileRef,
    FileOutcome,
    Result,
    group_tmp_name,
    is_temp_name,
    old_name,
    tmp_name,
)
from .sparse import CHUNK, ZERO, hash_zeros, next_data, next_hole, sample_offsets


@dataclass
class Prepared:
    """A verified copy under its temp name, ready to swap: the original (``src``, leased if
    ``leased``) and the copy (``tmp``) are still open."""

    dfd: int
    ref: FileRef
    src: int
    tmp: int
    leased: bool
    copy_ino: int
    written: int


class _Abort(Exception):
    def __init__(self, outcome: FileOutcome, reason: str = "") -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def _link_noreplace(dfd: int, src: bytes, dst: bytes) -> None:
    os.link(src, dst, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)


def _same(st: os.stat_result, ref: FileRef) -> bool:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (ref.ino, ref.size, ref.mtime_ns, ref.ctime_ns)


class Copier:
    def __init__(
        self,
        verify: str = "hash",
        stop: threading.Event | None = None,
        throttle: Throttle | None = None,
        use_lease: bool = True,
    ) -> None:
        if verify not in ("hash", "size", "none"):
            raise ValueError(verify)
        self.verify = verify
        self.stop = stop or threading.Event()
        self.throttle = throttle or Throttle(None)
        self.use_lease = use_lease

    # -- the whole file -----------------------------------------------------------------------

    def copy(self, dfd: int, ref: FileRef, on_created: Callable[[int], None] | None = None) -> Result:
        """Rewrite one file, its copy fsynced on its own. Never raises for a per-file problem: the
        outcome says what happened. ``on_created(copy_ino)`` is called once the temp file exists."""
        p = self.prepare(dfd, ref, on_created, fsync=True)
        return p if isinstance(p, Result) else self.swap(p)

    def prepare(self, dfd: int, ref: FileRef, on_created: Callable[[int], None] | None = None,
                fsync: bool = True) -> Prepared | Result:
        """Steps 1-3: the verified copy under its temp name, the original still open (and leased).
        ``fsync`` False: the caller makes a whole batch durable with one barrier (durable.py) before
        it calls ``swap``; the Prepared holds two open descriptors until then. A Result: failed."""
        src = tmp = -1
        tmp_made = False
        tname = tmp_name(ref.ino)
        written = 0
        try:
            src, st = _open_original(dfd, ref)
            why = attrs.protected(src)
            if why:
                return Result(FileOutcome.PROTECTED, reason=why)
            leased = self._lease(src)
            try:
                # owner-only while written (no default ACL nor umask widens it); the original's mode last
                tmp = _open_noatime(
                    tname, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, dfd, attrs.TEMP_MODE,
                )
            except FileExistsError:
                return Result(FileOutcome.FAILED, reason=f"temp name {tname.decode()} exists (left by someone else?)")
            tmp_made = True
            tst = os.fstat(tmp)
            if on_created:
                on_created(tst.st_ino)
            attrs.take_owner(tmp, st, tst)
            # a file with as many blocks as bytes has no hole to look for (two lseeks saved per file)
            dense = st.st_blocks * 512 >= ref.size
            digest, written = self._copy_data(src, tmp, ref.size, leased, dense)
            self._copy_metadata(src, tmp, st, tst)
            if fsync:
                os.fsync(tmp)
            self._verify(src, tmp, ref.size, digest)
            p = Prepared(dfd, ref, src, tmp, leased, tst.st_ino, written)
            src = tmp = -1  # handed over to the Prepared
            tmp_made = False
            return p
        except (_Abort, OSError) as e:
            return _failure(e, written)
        finally:
            if tmp >= 0:
                os.close(tmp)
            if tmp_made:
                _unlink_quiet(dfd, tname)
            if src >= 0:
                os.close(src)  # releases the lease

    def swap(self, p: Prepared) -> Result:
        """Step 4 for a prepared (durable) copy: the original checked unchanged, the copy renamed over
        it while the original keeps an anchor name. Closes the Prepared's descriptors."""
        dfd, ref, src = p.dfd, p.ref, p.src
        tname, oname = tmp_name(ref.ino), old_name(ref.ino)
        tmp_made, old_made = True, False
        try:
            self._check_unchanged(dfd, src, ref, p.leased)
            # Swap. The original first gets a second hidden name, so that it can be put back.
            _link_noreplace(dfd, ref.name, oname)
            old_made = True
            os.rename(tname, ref.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            tmp_made = False
            if p.leased and not self.lease_held(src):
                # A writer opened the original in the instant of the swap: give it back its file.
                old_made = False  # whatever happens now, the original keeps a name
                try:
                    os.rename(oname, ref.name, src_dir_fd=dfd, dst_dir_fd=dfd)
                except OSError as e:
                    return Result(FileOutcome.FAILED, p.written, f"a writer came during the swap and the original could "
                                  f"not be put back ({e.strerror}): it is kept as {oname.decode()}", p.copy_ino)
                return Result(FileOutcome.IN_USE, p.written, "opened for writing during the swap", p.copy_ino)
            os.unlink(oname, dir_fd=dfd)
            old_made = False
            return Result(FileOutcome.SWAPPED, p.written, copy_ino=p.copy_ino)
        except (_Abort, OSError) as e:
            return _failure(e, p.written)
        finally:
            self.drop(p, unlink=tmp_made)
            if old_made:
                _unlink_quiet(dfd, oname)

    @staticmethod
    def drop(p: Prepared, unlink: bool = True) -> None:
        """Close a Prepared's descriptors (releasing the lease), and remove its temp unless told not to."""
        if p.tmp >= 0:
            os.close(p.tmp)
            p.tmp = -1
        if unlink:
            _unlink_quiet(p.dfd, tmp_name(p.ref.ino))
        if p.src >= 0:
            os.close(p.src)
            p.src = -1

    # -- a hardlink group ---------------------------------------------------------------------

    def copy_group(self, names: list[tuple[int, FileRef]], on_copy: Callable[[int], None] | None = None) -> Result:
        """Rewrite a hardlink group as one: one new inode, linked under every name of the group.

        ``names``: (directory fd, ref) of every name of the inode, all inside the target.
        ``on_copy(copy_ino)`` runs once the verified copy has its temp names and before any name is
        switched: the journal must know the new inode to finish a half-switched group after a crash.
        While names are switched, the original keeps a hidden anchor name, so that the group can be
        switched back if a writer opens the file meanwhile.
        """
        dfd0, ref0 = names[0]
        ino = ref0.ino
        src = tmp = -1
        temps: list[tuple[int, bytes]] = []  # temp names to remove if we stop half-way
        anchor: tuple[int, bytes] | None = None
        swapped: list[int] = []
        written = 0
        try:
            src, st = _open_original(dfd0, ref0)
            if st.st_nlink != len(names):
                return Result(FileOutcome.CHANGED, reason="the link group changed since the scan")
            why = attrs.protected(src)
            if why:
                return Result(FileOutcome.PROTECTED, reason=why)
            leased = self._lease(src)
            t0 = tmp_name(ino)
            try:
                tmp = _open_noatime(t0, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, dfd0,
                                    attrs.TEMP_MODE)
            except FileExistsError:
                return Result(FileOutcome.FAILED, reason=f"temp name {t0.decode()} exists (left by someone else?)")
            temps.append((dfd0, t0))
            tst = os.fstat(tmp)
            attrs.take_owner(tmp, st, tst)
            digest, written = self._copy_data(src, tmp, ref0.size, leased)
            self._copy_metadata(src, tmp, st, tst)
            os.fsync(tmp)
            self._verify(src, tmp, ref0.size, digest)
            for dfd, ref in names:
                self._check_unchanged(dfd, src, FileRef(ref.dir, ref.name, ino, ref0.size, ref0.mtime_ns, ref0.ctime_ns), leased)
            for k, (dfd, _ref) in enumerate(names[1:], 1):
                os.link(t0, group_tmp_name(ino, k), src_dir_fd=dfd0, dst_dir_fd=dfd, follow_symlinks=False)
                temps.append((dfd, group_tmp_name(ino, k)))
            if on_copy:
                on_copy(tst.st_ino)
            os.link(ref0.name, old_name(ino), src_dir_fd=dfd0, dst_dir_fd=dfd0, follow_symlinks=False)
            anchor = (dfd0, old_name(ino))
            for k, (dfd, ref) in enumerate(names):
                if leased and not self.lease_held(src):
                    raise _Abort(FileOutcome.IN_USE, "opened for writing while the group was switched")
                tname = t0 if k == 0 else group_tmp_name(ino, k)
                os.rename(tname, ref.name, src_dir_fd=dfd, dst_dir_fd=dfd)
                temps.remove((dfd, tname))
                swapped.append(k)
            if leased and not self.lease_held(src):
                raise _Abort(FileOutcome.IN_USE, "opened for writing while the group was switched")
            return Result(FileOutcome.SWAPPED, written, copy_ino=tst.st_ino)
        except (_Abort, OSError) as e:
            if swapped and anchor:
                try:
                    self._switch_back(names, swapped, anchor, ino)
                except OSError as back:
                    # Some names point at the verified copy, some at the original. Nothing is lost
                    # (both hold the same content); the original keeps its anchor name for the admin.
                    kept = anchor[1].decode()
                    anchor = None
                    return Result(FileOutcome.FAILED, written, f"the link group is split: switching back failed "
                                  f"({back.strerror}); the original is kept as {kept}")
            return _failure(e, written)
        finally:
            if tmp >= 0:
                os.close(tmp)
            for dfd, name in temps:
                _unlink_quiet(dfd, name)
            if anchor:
                _unlink_quiet(*anchor)
            if src >= 0:
                os.close(src)

    @staticmethod
    def _switch_back(names: list[tuple[int, FileRef]], swapped: list[int], anchor: tuple[int, bytes], ino: int) -> None:
        """Point the names already switched back at the original (through its anchor name)."""
        adfd, aname = anchor
        for k in swapped:
            dfd, ref = names[k]
            back = group_tmp_name(ino, k + 1000)
            os.link(aname, back, src_dir_fd=adfd, dst_dir_fd=dfd, follow_symlinks=False)
            os.rename(back, ref.name, src_dir_fd=dfd, dst_dir_fd=dfd)

    # -- steps --------------------------------------------------------------------------------

    def _lease(self, fd: int) -> bool:
        if not self.use_lease or not sigio_harmless():
            return False
        try:
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
            return True
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EBUSY):
                raise _Abort(FileOutcome.IN_USE, "open for writing by another process") from None
            return False  # no lease support here (EINVAL, ENOLCK, EPERM): rely on the unchanged-check

    @staticmethod
    def lease_held(fd: int) -> bool:
        try:
            return fcntl.fcntl(fd, F_GETLEASE) == fcntl.F_RDLCK
        except OSError:
            return False

    def _copy_data(self, src: int, dst: int, size: int, leased: bool, dense: bool = False) -> tuple[bytes, int]:
        """Copy ``size`` bytes, keeping holes; return the xxh3-128 of the content and bytes written.
        ``dense``: the file has no holes to find (all-zero chunks still stay holes in the copy)."""
        h = xxhash.xxh3_128()
        buf = bytearray(CHUNK)
        mv = memoryview(buf)
        zmv = memoryview(ZERO)
        off = 0
        end = 0  # end of the last data written
        written = 0
        since_check = 0
        seg_end = size if dense else 0  # end of the data segment that ``off`` lies in
        while off < size:
            if self.stop.is_set():
                raise _Abort(FileOutcome.ABORTED, "stop requested")
            if off >= seg_end:
                data_at = next_data(src, off, size)
                if data_at > off:  # a hole: leave it unwritten in the copy, hash it as zeros
                    hash_zeros(h, data_at - off)
                    off = data_at
                    continue
                seg_end = next_hole(src, off, size)
            want = min(CHUNK, seg_end - off)
            n = os.preadv(src, [mv[:want]], off)
            if n <= 0:
                raise _Abort(FileOutcome.CHANGED, "file shrank while being copied")
            chunk = mv[:n]
            h.update(chunk)
            nonzero = chunk != zmv[:n]
            if nonzero:
                pos = 0
                while pos < n:
                    pos += os.pwritev(dst, [chunk[pos:]], off + pos)
                written += n
                self.throttle.consume(n, self.stop)
            off += n
            since_check += n
            if leased and since_check >= LEASE_CHECK_BYTES:
                since_check = 0
                if not self.lease_held(src):
                    raise _Abort(FileOutcome.IN_USE, "opened for writing during the copy")
            if nonzero:
                end = off
        if end < size:
            os.ftruncate(dst, size)  # the file ends in a hole (or is empty of data)
        return h.digest(), written

    @staticmethod
    def _copy_metadata(src: int, dst: int, st: os.stat_result, tst: os.stat_result) -> None:
        """Xattrs, flags, mode, times (attrs.py); ``tst``: the new file as created."""
        attrs.copy_metadata(src, dst, st)

    def _verify(self, src: int, dst: int, size: int, digest: bytes) -> None:
        if self.verify != "hash" and os.fstat(dst).st_size != size:
            raise _Abort(FileOutcome.VERIFY, "copy has the wrong size")
        if self.verify == "none":
            return
        # The copy is read back through the file system. No cache is dropped first: on ZFS the
        # re-read is served by the ARC either way (a page-cache drop only adds a FUSE round trip on
        # zfs-fuse); the media are covered by ZFS's own block checksums. What this catches is a copy
        # that differs from what was read: a short or misplaced write, a hole in the wrong place.
        if self.verify == "hash":
            h = xxhash.xxh3_128()
            buf = bytearray(CHUNK)
            mv = memoryview(buf)
            off = 0
            while True:  # the last read asks for one byte more: a longer copy shows without a read of its own
                if self.stop.is_set():
                    raise _Abort(FileOutcome.ABORTED, "stop requested")
                want = min(CHUNK, size + 1 - off)
                n = os.preadv(dst, [mv[:want]], off)
                if n <= 0:
                    if off < size:
                        raise _Abort(FileOutcome.VERIFY, "copy is short")
                    break
                if off + n > size:
                    raise _Abort(FileOutcome.VERIFY, "copy is longer than the original")
                h.update(mv[:n])
                off += n
                if n < want and off == size:  # a short read at the size: the end of the file
                    break
            if h.digest() != digest:
                raise _Abort(FileOutcome.VERIFY, "copy read back differs from the original (hash)")
            return
        # size: compare samples of both files
        for off in sample_offsets(size):
            a = os.pread(src, 65536, off)
            b = os.pread(dst, 65536, off)
            if a != b:
                raise _Abort(FileOutcome.VERIFY, f"copy differs from the original at offset {off}")

    def _check_unchanged(self, dfd: int, src: int, ref: FileRef, leased: bool) -> None:
        try:
            now = os.stat(ref.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            raise _Abort(FileOutcome.GONE, "deleted while being copied") from None
        if now.st_ino != ref.ino:
            raise _Abort(FileOutcome.CHANGED, "replaced while being copied")
        if not _same(os.fstat(src), ref):
            raise _Abort(FileOutcome.CHANGED, "modified while being copied")
        if leased and not self.lease_held(src):
            raise _Abort(FileOutcome.IN_USE, "opened for writing during the copy")


# -- helpers ----------------------------------------------------------------------------------


def _failure(e: BaseException, written: int) -> Result:
    """The outcome of a copy that stopped: the reason given, or what the OS error means."""
    if isinstance(e, _Abort):
        return Result(e.outcome, written, e.reason)
    err = getattr(e, "errno", None)
    if err in (errno.ENOSPC, errno.EDQUOT):
        return Result(FileOutcome.NOSPACE, written, "no space left for the copy")
    return Result(FileOutcome.FAILED, written, f"{os.strerror(err) if err else e}")


def _open_original(dfd: int, ref: FileRef) -> tuple[int, os.stat_result]:
    """Open the original as the scan saw it, or abort (GONE / CHANGED). O_NONBLOCK: a file swapped
    for a FIFO since the scan must not hang the open; O_NOATIME: reading must not touch its atime."""
    try:
        fd = _open_noatime(ref.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dfd)
    except FileNotFoundError:
        raise _Abort(FileOutcome.GONE, "deleted before the copy") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not _same(st, ref):
        os.close(fd)
        raise _Abort(FileOutcome.CHANGED, "changed since the scan")
    return fd, st


def sigio_harmless() -> bool:
    """A broken lease is announced with SIGIO, whose default action ends the process. Ignore it
    (the lease state is polled with F_GETLEASE); where that cannot be arranged, take no lease."""
    import signal

    if signal.getsignal(signal.SIGIO) not in (signal.SIG_DFL, None):
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGIO, signal.SIG_IGN)
    return True


def _open_noatime(name: bytes, flags: int, dfd: int, mode: int = 0o600) -> int:
    try:
        return os.open(name, flags | os.O_NOATIME, mode, dir_fd=dfd)
    except PermissionError:  # O_NOATIME needs ownership or CAP_FOWNER
        return os.open(name, flags, mode, dir_fd=dfd)


def _unlink_quiet(dfd: int, name: bytes) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass


