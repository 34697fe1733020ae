"""What one zfs replication run is made of, apart from the replicator that runs it: the job as the
zfs mode reads it (`Job`), the run's report (`ZfsReport`, a `DatasetReport` per dataset), and the view
of a run the replicator's helpers (retention.py, targets.py, unchanged.py, capabilities.py) work
on (`Replicating`), so that they name its parts without importing the replicator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from .policy import Buckets, Snap
from ..outcome import Outcome

if TYPE_CHECKING:
    from ..state import Cache
    from ..zfs.host import ZfsHost
    from .select import Selection
    from ..transport import Wire


@dataclass
class DatasetReport:
    source: str
    target: str
    kind: str = ""  # full, incremental, resumed, nothing, unchanged (sat the run out), renamed (not sent twice), failed
    base: str | None = None
    bytes: int = 0
    expected: int | None = None
    error: str = ""
    seconds: float = 0.0  # time the stream took
    started: float = 0.0  # when the stream began (epoch seconds): parallel streams overlap
    base_bookmark: bool = False  # the incremental started from a bookmark
    cursor: str = ""  # what keeps the next base: "bookmark" (pins nothing) or "hold" (a held snapshot)


@dataclass
class ZfsReport:
    snapshot: str = ""
    datasets: list[DatasetReport] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    aborted_tokens: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)  # target -> receive_resume_token found
    pruned_source: list[str] = field(default_factory=list)
    pruned_target: list[str] = field(default_factory=list)
    pruned_bookmarks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the run worked but needs the admin (a rename)
    planned: list[str] = field(default_factory=list)  # dry run: what would be done
    phases: dict[str, float] = field(default_factory=dict)  # seconds of each part of the run
    excluded: list[str] = field(default_factory=list)  # datasets of the source left out, and why
    placeholders: list[str] = field(default_factory=list)  # parents made on the target for an included child
    remote_commands: int = 0  # ssh round trips of the run (streams included)
    local_commands: int = 0  # zfs commands run here (pyzfs calls not counted)
    # what the run asked of the backup: "bases" (each chosen dataset's base, nothing listed), "part"
    # (the datasets with something to send, their parents, backups no longer chosen) or "whole"
    backup_asked: str = ""
    backup_listed: int = 0  # datasets listed on the backup ("part": those asked; "whole": found)
    backup_recorded: int = 0  # datasets rebal's record stood for, their listing not asked (backup_record.py)
    source_recorded: int = 0  # datasets of a no-change run whose source listing rebal's record stood for (source_record.py)

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.datasets)

    @property
    def expected(self) -> int | None:
        vals = [d.expected for d in self.datasets if d.kind not in ("nothing", "unchanged")]
        return None if any(v is None for v in vals) else sum(v for v in vals if v)

    @property
    def failed(self) -> list[DatasetReport]:
        return [d for d in self.datasets if d.kind == Outcome.FAILED]


@dataclass
class Job:
    """What the zfs mode needs of a `[[replicate]]` job (see config.Replicate)."""

    name: str
    source: str
    target: str
    recursive: bool = False
    raw: bool = False
    compressed: bool = True
    large_blocks: bool = True
    embedded: bool = True
    bwlimit: int | None = None
    stream_compress: str = "none"
    mbuffer: bool = False
    retention_source: Buckets = field(default_factory=Buckets)
    retention_target: Buckets = field(default_factory=Buckets)
    parallel: int = 2
    pull: bool = False  # run on the backup host: the source is the other end, the target is here
    stream_compress_level: int = 3
    mbuffer_size: str = "128M"
    exclude: tuple[str, ...] = ()  # which datasets (select.py)
    include: tuple[str, ...] = ()
    by_property: bool = False
    skip_unchanged: bool = True  # a dataset with nothing written since its base sits the run out
    keep_base: bool = False  # the source keeps its base snapshot beside the bookmark (config.Replicate)


class Replicating(Protocol):
    """A zfs replication run as its helpers see it (zfs_send.ZfsReplicator is one)."""

    job: Job
    report: ZfsReport
    source: ZfsHost  # the source's host: here, or the other end for a pull job
    target: ZfsHost  # the backup's host: the other end for a push job, here for a pull job or a local target
    ssh: Wire
    gate: dict | None  # what a gate on the other end allows (None: no gate)
    cache: Cache | None
    landed: dict[str, str]
    recorded: dict[str, float]
    selection: Selection
    source_tree: dict[str, list[Snap]]
    target_tree: dict[str, list[Snap]]
    orphans: dict[str, list[Snap]]
    bookmarks: bool
    dry_run: bool

    def target_of(self, ds: str) -> str: ...

    def source_of(self, target: str) -> str: ...

    def gated_since(self, err: str) -> bool: ...

    def may_skip(self) -> bool: ...
