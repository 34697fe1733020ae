"""The stream side of a `ZfsHost`: the send and receive command lines of a transfer (replication,
restore, heal: replicate/stream.Transfer pumps them), built from the host's abilities, and the
estimates a send gives of itself. A mixin: ZfsHost gives it its link, `run` and `abilities`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import names
from ..errors import HostError
from ..process.command import Result
from . import argv as zargv
from .abilities import Abilities
from .token import TokenInfo, parse_send_size, parse_token_check

if TYPE_CHECKING:
    from .link import Link


class Streams:
    # what ZfsHost (host.py) gives this mixin
    run: Callable[..., Result]
    abilities: Callable[[], Abilities]
    link: Link

    def pipe(self, parts: list[list[str]]) -> list[list[str]]:
        """Commands piped one into the next on this host, as the processes rebal starts for them:
        each itself here, one ssh for them all there."""
        return [list(p) for p in parts] if self.link.local else [self.link.argv(*parts)]

    def send_flags(self, *, raw: bool, compressed: bool = True, large_blocks: bool = True,
                   embedded: bool = True) -> list[str]:
        a = self.abilities()
        if raw and not a.raw:
            raise HostError(f"{self.link.where}: this zfs cannot send raw (-w), which encrypted datasets need")
        return [*(["-w"] if raw else []), *(["-c"] if compressed and a.compressed and not raw else []),
                *(["-L"] if large_blocks and a.large_blocks else []), *(["-e"] if embedded and a.embedded else [])]

    def send(self, snapshot: str, flags: list[str]) -> list[str]:
        """`zfs send` of ``snapshot`` with ``flags`` (the incremental part among them:
        replicate.stream.incremental_args), a command to run on this host (``pipe``)."""
        names.snapshot(snapshot)
        return zargv.send(snapshot, flags)

    def token_sends(self, token: str) -> TokenInfo | None:
        """What a receive's resume token would send from this host (`zfs send -t TOKEN -nvP`); None
        where it cannot (its snapshot is gone, or the token is not one)."""
        res = self.run(zargv.send_resume(token, estimate=True), check=False)
        return parse_token_check(res.stdout + res.stderr) if res.returncode == 0 else None

    def send_size(self, snapshot: str, flags: list[str]) -> int | None:
        """What `zfs send` of ``snapshot`` with ``flags`` would send, in bytes (`-nP`); None where
        this zfs cannot say."""
        names.snapshot(snapshot)
        res = self.run(zargv.send(snapshot, ["-nP", *flags]), check=False)
        return parse_send_size(res.stdout + res.stderr) if res.returncode == 0 else None

    def resume_send(self, token: str) -> list[str]:
        return zargv.send_resume(token)

    def receive(self, dataset: str, *, force: bool = False, mount: bool = True, exclude: tuple[str, ...] = (),
                props: dict[str, str] | None = None, corrective: bool = False,
                resumable: bool | None = None) -> list[str]:
        """`zfs receive` into ``dataset``, a command to run on this host (``pipe``): resumable (-s)
        where this zfs can (``resumable``: where the stream's two ends can, a replication's say);
        ``mount`` False: not mounted (-u) where it can; ``props`` set as it lands (-o) and
        ``exclude``'s taken from the stream (-x) where it can; ``force``: rolled back first (-F);
        ``corrective``: heal the blocks of an existing snapshot (-c)."""
        names.snapshot(dataset) if corrective else names.dataset(dataset)
        a = self.abilities()
        if corrective:
            if not a.corrective:
                raise HostError(f"{self.link.where}: this zfs has no corrective receive (zfs receive -c, OpenZFS 2.2+)")
            return ["zfs", "receive", "-c", dataset]
        resume = a.resumable if resumable is None else resumable and a.receive_resume
        opts = [*(["-s"] if resume else []), *(["-u"] if not mount and a.receive_u else [])]
        for prop in exclude if a.receive_x else ():
            opts += ["-x", prop]
        for prop, value in (props or {}).items() if a.receive_o else ():
            opts += ["-o", f"{prop}={value}"]
        return ["zfs", "receive", *opts, *(["-F"] if force else []), dataset]
