"""The ZFS kernel module's parameters (/sys/module/zfs/parameters): host-wide, reset at boot, and
absent where ZFS is not OpenZFS's kernel module (zfs-fuse). The only place rebal reads or writes them."""

from __future__ import annotations

import os
from pathlib import Path

PARAMETERS = Path("/sys/module/zfs/parameters")


class Parameter:
    """One module parameter holding an integer. ``root`` is where the parameters live (the real
    /sys/module/zfs/parameters but in the tests of what a dead run leaves, which no real one can
    show without a module)."""

    def __init__(self, name: str, root: Path = PARAMETERS) -> None:
        self.name = name
        self.path = root / name

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> int | None:
        """Its value now; None where the module has no such parameter."""
        try:
            return int(self.path.read_text().strip())
        except FileNotFoundError:
            return None

    def write(self, value: int) -> None:
        """Set it (OSError where it cannot be written: not root, /sys read-only in a unit's sandbox)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, f"{int(value)}\n".encode())
        finally:
            os.close(fd)


def boot_id() -> str:
    """This boot's identity: a value set before a reboot is gone after it (the module starts again)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
