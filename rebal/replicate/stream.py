"""One zfs stream from one host's ZFS into another's, the way back: a dataset's restore,
a tree's restore (restore --all, rebuild) and a heal's corrective receive are each a `Transfer` with
the replication's hosts swapped. It owns what the replication does to a stream, so that a restore
does the same: the send's flags from the job (raw, compressed, large blocks, embedded; `-i` from a
snapshot base with nothing between, `-I` with snapshots between, `-i` from a bookmark), the stream's
filters (zstd at the job's level and mbuffer of the job's size, where both ends have them:
`stream_filters`, which the replicator's filters are too), each end's part of the pipe run on its
host (one ssh for the other end's part), the pump (the job's bandwidth limit, progress, stop), the
dry run's line, and a failure as one message (an ssh failure classified).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..process.pipeline import StreamResult, pump
from ..throttle import Throttle
from ..units import parse_size
from ..zfs.host import ZfsHost
from ..transport import Wire, classify_ssh


class StreamJob(Protocol):  # config.Replicate, and the replicator's copy of it (read only)
    @property
    def raw(self) -> bool: ...
    @property
    def compressed(self) -> bool: ...
    @property
    def large_blocks(self) -> bool: ...
    @property
    def embedded(self) -> bool: ...
    @property
    def stream_compress(self) -> str: ...
    @property
    def stream_compress_level(self) -> int: ...
    @property
    def mbuffer(self) -> bool: ...
    @property
    def mbuffer_size(self) -> str: ...


def stream_filters(job: StreamJob, *, local: bool, here: Callable[[str], bool],
                   there: Callable[[str], bool]) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """(the filters after the send, the filters before the receive, notes): zstd where both ends have
    it and the stream crosses a network, mbuffer of the job's size on each end (one, on a local
    stream). ``here``/``there``: is a program on this host's / the other end's PATH."""
    send: list[list[str]] = []
    recv: list[list[str]] = []
    notes: list[str] = []
    # in KiB, a whole number: "1.5G" is a size rebal takes, and a gate checks digits and a unit
    buffer = ["mbuffer", "-q", "-m", f"{max(1, parse_size(job.mbuffer_size) // 1024)}k"]
    if local:  # no wire: compressing would only cost CPU; one buffer between send and receive
        if job.stream_compress == "zstd":
            notes.append("a local target: the stream is not compressed (no network to save)")
        if job.mbuffer and here("mbuffer"):
            send.append(buffer)
        elif job.mbuffer:
            notes.append("mbuffer is not installed: the stream is not buffered")
        return send, recv, notes
    if job.stream_compress == "zstd":
        if here("zstd") and there("zstd"):
            send.append(["zstd", "-c", "-T0", f"-{job.stream_compress_level}"])
            recv.append(["zstd", "-dc"])
        else:
            notes.append("zstd is not installed on both ends: the stream is sent uncompressed")
    if job.mbuffer:
        if here("mbuffer") and there("mbuffer"):
            send.append(buffer)
            recv.insert(0, buffer)
        else:
            notes.append("mbuffer is not installed on both ends: the stream is not buffered")
    return send, recv, notes


def incremental_args(base: str | None, *, between: bool = False) -> list[str]:
    """The incremental part of a send from ``base`` (`@snap` or `ds#bookmark`): `-I` only where there
    are snapshots between (it makes zfs look at every snapshot of the dataset, 1.6 s against 0.1 s at
    2,000), `-i` otherwise and from a bookmark (which cannot start an -I)."""
    if base is None:
        return []
    return ["-I" if between and "#" not in base else "-i", base]


def counted(own: Callable[[int], None], done: int, outer: Callable[[int], None] | None) -> Callable[[int], None]:
    """A stream's progress in a run of several, one after another: its own bytes to ``own``, and the
    run's (``done`` before it, plus its own) to ``outer``."""
    def progress(n: int) -> None:
        own(n)
        if outer:
            outer(done + n)

    return progress


class StreamFailed(Exception):
    """A stream that did not land: ``message`` says why in one line (the receiver's error first)."""

    def __init__(self, message: str, result: StreamResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class Transfer:
    """One job's streams from ``sender`` (the host that holds the snapshot) into ``receiver``; ``link``
    reaches the end that is not this host (local: both are here)."""

    sender: ZfsHost
    receiver: ZfsHost
    job: StreamJob
    link: Wire
    bwlimit: str | None = None
    stop: threading.Event | None = None
    notes: list[str] = field(default_factory=list)
    # the replicator's: the filters it chose (a gate says what the other end has) and the byte rate
    # its streams share (sent in parallel); else chosen here from the job and the hosts
    filters: tuple[list[list[str]], list[list[str]]] | None = None
    throttle: Throttle | None = None

    def __post_init__(self) -> None:
        if self.filters is None:
            other = self.receiver if self.sender.local else self.sender
            send, recv, notes = stream_filters(
                self.job, local=self.link.local, here=lambda p: shutil.which(p) is not None, there=other.has)
            self.filters = (send, recv)
            self.notes.extend(notes)
        self.filters_send, self.filters_recv = self.filters
        if self.throttle is None:
            self.throttle = Throttle(parse_size(self.bwlimit) if self.bwlimit else None)

    def send(self, snapshot: str, *, base: str | None = None, between: bool = False,
             token: str | None = None, flags: list[str] | None = None) -> list[str]:
        """The send command (on the sender's host): the job's flags (or ``flags``), from ``base`` where
        given, or the resume of a cut receive from its ``token``."""
        if token:
            return self.sender.resume_send(token)
        j = self.job
        if flags is None:
            flags = self.sender.send_flags(raw=j.raw, compressed=j.compressed, large_blocks=j.large_blocks,
                                           embedded=j.embedded)
        return self.sender.send(snapshot, flags + incremental_args(base, between=between))

    def size(self, snapshot: str, *, base: str | None = None, between: bool = False) -> int | None:
        """What ``send`` of the same would move, in bytes (`zfs send -nP`); None where the sender's
        zfs cannot say."""
        if not self.sender.abilities().send_size:
            return None
        j = self.job
        flags = self.sender.send_flags(raw=j.raw, compressed=j.compressed, large_blocks=j.large_blocks,
                                       embedded=j.embedded)
        return self.sender.send_size(snapshot, flags + incremental_args(base, between=between))

    def pump(self, senders: list[list[str]], recv: list[str], *, progress: Callable[[int], None] | None = None,
             procs: list | None = None) -> StreamResult:
        """The stream moved, its result as it came (the replicator explains a failure in its own
        words; ``run`` raises): each end's part of the pipe on its host (one ssh for the other end's),
        the filters between, the job's byte rate, stop and progress; ``procs`` collects the
        processes (killed if the run is cut)."""
        sending = self.sender.pipe([*senders, *self.filters_send])
        *receiving, receiver = self.receiver.pipe([*self.filters_recv, recv])
        return pump(sending + receiving, receiver, throttle=self.throttle, stop=self.stop, progress=progress,
                    procs=procs)

    def line(self, send: list[str], recv: list[str]) -> str:
        """What a dry run shows: each end's part of the pipe as it would run there."""
        parts = [self._shown(self.sender, [send, *self.filters_send]),
                 self._shown(self.receiver, [*self.filters_recv, recv])]
        return " | ".join(parts)

    @staticmethod
    def _shown(host: ZfsHost, cmds: list[list[str]]) -> str:
        inner = " | ".join(" ".join(c) for c in cmds)
        return inner if host.local else f"ssh {host.where} {inner!r}"

    def run(self, send: list[str], recv: list[str], *, progress: Callable[[int], None] | None = None,
            what: str = "the stream") -> StreamResult:
        """Pump the stream. A failure raises StreamFailed (a stopped one too: ``result.stopped``); ssh's
        own failure (exit 255) its TransportError."""
        res = self.pump([send], recv, progress=progress)
        if res.ok:
            return res
        if res.stopped:
            raise StreamFailed(f"{what}: stopped", res)
        if 255 in (res.sender_rc, res.receiver_rc) and not self.link.local:
            raise classify_ssh(self.link.ep, res.sender_err or res.receiver_err)  # (a TransportError: exit 3)
        raise StreamFailed(f"{what} failed: {res.said[-300:]}", res)
