"""What the copier and the journal share: rebal's hidden names beside a file, a file as the scan saw
it, the outcome of one copy."""

from __future__ import annotations

import enum
import os
import stat
from dataclasses import dataclass

# files a copy pass leaves for a later run, not failures (their directories are not marked done)
DEFER_MAX_BYTES = "larger than --max-bytes"
DEFER_RESERVE = "too large for the space above the reserve"
DEFERRED = (DEFER_MAX_BYTES, DEFER_RESERVE)


def tmp_name(ino: int) -> bytes:
    """Hidden name of the new copy: short, whatever the length of the original's name."""
    return b".rebal-%x.tmp" % ino


def old_name(ino: int) -> bytes:
    """Hidden second name the original keeps for the instant of the swap."""
    return b".rebal-%x.old" % ino


def group_tmp_name(ino: int, k: int) -> bytes:
    """Hidden name of the copy beside the k-th name (k >= 1) of a hardlink group."""
    return b".rebal-%x-%d.tmp" % (ino, k)


TEMP_PREFIX = b".rebal-"  # every temp and anchor name begins so


def is_temp_name(name: bytes) -> bool:
    return name.startswith(TEMP_PREFIX) and (name.endswith(b".tmp") or name.endswith(b".old"))


class FileOutcome(enum.StrEnum):
    SWAPPED = "swapped"
    CHANGED = "changed"  # modified or replaced meanwhile: copy dropped, retry later
    IN_USE = "in-use"  # open for writing (lease refused or broken)
    GONE = "gone"  # deleted meanwhile
    NOSPACE = "nospace"  # ENOSPC / EDQUOT while copying: copy dropped
    ABORTED = "aborted"  # stop requested mid-copy: copy dropped
    FAILED = "failed"  # any other I/O error: copy dropped, original untouched
    VERIFY = "verify-failed"  # the copy read back differs: copy dropped
    PROTECTED = "protected"  # immutable or append-only (chattr +i/+a): never replaced


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file as the scan saw it."""

    dir: bytes
    name: bytes
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    alloc: int = 0  # bytes allocated (st_blocks): what a snapshot keeps when the file is rewritten

    @classmethod
    def from_stat(cls, d: bytes, name: bytes, st: os.stat_result) -> FileRef:
        return cls(d, name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_blocks * 512)

    @property
    def path(self) -> bytes:
        return os.path.join(self.dir, self.name)


@dataclass
class Result:
    outcome: FileOutcome
    written: int = 0
    reason: str = ""
    copy_ino: int | None = None


def restore_times(dfd: int, st: os.stat_result) -> None:
    """Give a directory back its times, durably: the journal marks it done next, after which a
    power cut must not bring back the times our renames gave it (seen on OpenZFS 2.4.4: the
    setattr sat in an unsynced transaction group while the journal said done)."""
    try:
        os.utime(dfd, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.fsync(dfd)
    except OSError:
        pass


def restat(dfd: int, ref: FileRef) -> FileRef | None:
    try:
        st = os.stat(ref.name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        return None
    return FileRef.from_stat(ref.dir, ref.name, st)
