"""What the two ends of a zfs replication can do, asked once per run: the source's send options and
the backup's receive options (ZfsHost.abilities; the other end's usage text kept a day in the state
database), a gate on the other end and what it allows, and the stream's filters (zstd at the job's level, mbuffer of the job's
size) where they are installed on both ends. A mixin of ZfsReplicator."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from ..zfs.host import ZfsHost
from .remote import ReplicationError
from ..transport import Wire

if TYPE_CHECKING:
    from ..state import Cache
    from .zfs_run import Job, ZfsReport


class Capabilities:
    # what ZfsReplicator (zfs_send.py) holds, which this mixin reads and sets
    job: Job
    ssh: Wire
    source: ZfsHost
    target: ZfsHost
    report: ZfsReport
    cache: Cache | None
    dry_run: bool
    force_rollback: tuple[str, ...]  # the datasets (source or backup names) a receive -F may roll back
    gate: dict | None
    resumable: bool

    @property
    def other(self) -> ZfsHost:
        """The host at the ssh's other end (the backup's in a push job, the source's in a pull job)."""
        return self.target if self.source.local else self.source

    def detect(self) -> None:
        """Each end's abilities (ZfsHost.abilities, the one model): the source's send options and
        the target's receive options, one usage text each. The other end's is kept a day in the state
        database (one round trip less), and a gate there says so in the text it passes on."""
        from ..gate.check import marker

        if not self.ssh.local and self.cache is not None:
            ep = self.ssh.ep
            self.other.keep_usage(self.cache, f"{ep.user}@{ep.host}:{ep.port}", store=not self.dry_run)
        sends, receives = self.source.abilities(), self.target.abilities()
        self.detect_gate(None if self.ssh.local else marker(self.other.usage("receive" if self.source.local else "send")))
        # both asked (no short cut): each end's listing then reads the text it was asked (lists_fast)
        can_send, can_receive = sends.send_resume, receives.receive_resume
        self.resumable = can_send and can_receive
        self.filters()

    def filters(self) -> None:
        """The stream's filters on the sending side (compress, buffer) and on the receiving side
        (buffer, decompress), each where it is installed on its end (stream.stream_filters: the same
        as a restore's)."""
        from .stream import stream_filters

        def there(program: str) -> bool:  # on the other end (a gate says what it has: no shell to ask)
            if self.gate is not None:
                return program in self.gate.get("filters", [])
            return self.other.has(program)

        self.filters_send, self.filters_recv, notes = stream_filters(
            self.job, local=self.ssh.local, here=lambda p: shutil.which(p) is not None, there=there)
        self.report.notes.extend(notes)

    def usage_stale(self, err: str) -> None:
        if any(w in err.lower() for w in ("invalid option", "usage:", "unrecognized")) and self.other.forget_usage():
            self.report.notes.append("the other end's zfs refused an option: its abilities are asked again next run")

    def gated_since(self, err: str) -> bool:
        """A refusal of a gate the kept usage text did not show (the key was gated after it was
        asked): forget it, so the next run (and its dry run alike) sees the gate. True if so."""
        if "rebal gate: refused" not in err or self.gate is not None:
            return False
        self.other.forget_usage()
        return True

    def detect_gate(self, info: dict | None) -> None:
        """Is the other end's key gated (rebal gate)? Then do only what the gate allows, and say what
        is left out; refuse up front what it would refuse midway."""
        self.gate = info
        if info is None:
            return
        mine = self.job.source if self.job.pull else self.job.target
        want = "send" if self.job.pull else "receive"
        root = str(info.get("root", ""))
        if info.get("mode") != want:
            raise ReplicationError(f"{self.ssh.ep.host}: this key is gated to {info.get('mode')} ({root}); "
                                   f"a {'pull' if self.job.pull else 'push'} job needs rebal gate --{want}-"
                                   f"{'from' if self.job.pull else 'into'} there")
        if mine != root and not mine.startswith(root + "/"):
            raise ReplicationError(f"{self.ssh.ep.host}: this key is gated to {root}; {mine} is outside it")
        if self.force_rollback and not self.job.pull and info.get("append_only"):
            raise ReplicationError(f"{self.ssh.ep.host}: {info.get('user')} may only append there (zfs allow "
                                   f"receive:append on {root}): ZFS refuses the rollback of --force-rollback; "
                                   "roll back on the backup host as root")
        if self.force_rollback and not self.job.pull and not info.get("allow_rollback"):
            raise ReplicationError(f"{self.ssh.ep.host}: the gate refuses zfs receive -F (--force-rollback); "
                                   "start it with --allow-rollback in authorized_keys, or roll back on the backup host")
        if not self.job.pull:
            self.report.notes.append(f"the backup host is gated (rebal gate --receive-into {root}): "
                                     f"retention of its snapshots is done there (rebal prune {self.job.target} "
                                     f"--job {self.job.name}), not from here")

    def send_flags(self) -> list[str]:
        f, j = self.source.abilities(), self.job
        flags = []
        if j.raw and f.raw:
            flags.append("-w")
        elif j.raw:
            self.report.notes.append("this zfs cannot send raw (-w); encrypted datasets go decrypted")
        if j.compressed and f.compressed and not j.raw:
            flags.append("-c")
        if j.large_blocks and f.large_blocks:
            flags.append("-L")
        if j.embedded and f.embedded:
            flags.append("-e")
        return flags

    def receive_argv(self, target: str, force: bool = False, full: bool = False) -> list[str]:
        """Into ``target`` on the backup's host, never mounted, resumable where both ends are;
        ``full``: a new replica, received read-only at once where zfs receive takes -o (else set after)."""
        return self.target.receive(target, force=force, mount=False, resumable=self.resumable,
                                   props={"readonly": "on"} if full else None)

    def target_of(self, ds: str) -> str:
        return self.job.target + ds[len(self.job.source):]
