"""Plain data: what rebal knows about pools and vdevs. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field

# Allocation classes. Only "normal" vdevs take ordinary file data, so only they count toward balance.
NORMAL = "normal"
CLASSES = ("normal", "special", "dedup", "log", "cache", "spare")


@dataclass(frozen=True, slots=True)
class Vdev:
    name: str  # unique within the pool: mirror-0, raidz1-1, or the device of a single-disk vdev
    type: str  # disk, file, mirror, raidz1, raidz2, raidz3, draid..., for a group the group's type
    size: int  # bytes (usable for a top-level vdev, as zpool reports it)
    alloc: int
    free: int
    vclass: str = NORMAL
    state: str = ""
    devices: tuple[str, ...] = ()  # leaf devices below a group vdev
    exact: bool = True  # False when the figures came from human units (rounded to 3 digits)
    guid: int | None = None  # the top-level vdev's guid where zpool says it (its JSON, OpenZFS 2.3+)

    @property
    def cap(self) -> float:
        """Percent of the vdev allocated."""
        return 100.0 * self.alloc / self.size if self.size else 0.0

    @property
    def is_data(self) -> bool:
        return self.vclass == NORMAL


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    size: int
    alloc: int
    free: int
    health: str
    vdevs: tuple[Vdev, ...] = ()
    source: str = ""  # which zpool output it was read from: json, parsable, iostat
    freeing: int | None = None  # bytes still to be freed (async destroy); None where the output does not say
    # (feature, enabled | active | disabled) pairs asked with the figures (a tuple: a Pool stays hashable); None if not asked
    features: tuple[tuple[str, str], ...] | None = None

    @property
    def data_vdevs(self) -> tuple[Vdev, ...]:
        return tuple(v for v in self.vdevs if v.is_data)

    @property
    def other_vdevs(self) -> tuple[Vdev, ...]:
        return tuple(v for v in self.vdevs if not v.is_data)

    @property
    def cap(self) -> float:
        return 100.0 * self.alloc / self.size if self.size else 0.0

    @property
    def spread(self) -> float:
        """max CAP - min CAP over the data vdevs, in percentage points (0 with fewer than two)."""
        caps = [v.cap for v in self.data_vdevs if v.size]
        return max(caps) - min(caps) if len(caps) >= 2 else 0.0


@dataclass
class StatusVdev:
    """One row of the config tree of `zpool status`."""

    name: str
    state: str
    read: int = 0
    write: int = 0
    cksum: int = 0
    section: str = NORMAL  # allocation class of the section the row sits in
    note: str = ""  # trailing text: "(resilvering)", "was /dev/sdb1", ...
    children: list[StatusVdev] = field(default_factory=list)

    def leaves(self) -> list[StatusVdev]:
        if not self.children:
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]


@dataclass
class PoolStatus:
    name: str
    state: str
    status: str = ""
    action: str = ""
    scan: str = ""  # the scan:/scrub:/expand: text, joined
    errors: str = ""
    vdevs: list[StatusVdev] = field(default_factory=list)  # top-level vdevs, every section
