"""What a host's zfs can do, read from its usage texts and version, and what `zfs allow` gives a user."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property


def usage_flags(text: str, command: str) -> set[str]:
    """Single-letter flags that the usage text of `zfs <command>` lists, over all its forms
    (`[-Fhnsuv]` and a bare `-t <token>` or `-A <filesystem>`)."""
    flags: set[str] = set()
    for m in re.finditer(rf"^\s*{command}\s+(.*)$", text, re.M):
        for group in re.findall(r"\[-([A-Za-z]+)\]", m.group(1)):
            flags.update(group)
        flags.update(re.findall(r"(?:^|\s)-([A-Za-z])(?=\s|$)", m.group(1)))
    return flags


class Abilities:
    """What one host's zfs can do: the one model of it, for a replication's two ends, a restore, a
    heal and `rebal config check` alike. Each part is asked of the host when first needed and then
    kept (ZfsHost keeps one per host and run): the send options from `zfs send`'s usage text, the
    receive options from `zfs receive`'s, the corrective receive from `zfs version` (the usage texts
    do not show it). A replication asks one text of each end, so a gate on the other end is asked
    only what it passes on."""

    def __init__(self, usage: Callable[[str], str], version: Callable[[], tuple[int, ...]]) -> None:
        self._usage, self._version = usage, version

    @classmethod
    def recorded(cls, send: str, receive: str, version: tuple[int, ...] = ()) -> Abilities:
        """From recorded usage texts (a test's, or `rebal config check`'s fixtures)."""
        return cls({"send": send, "receive": receive}.__getitem__, lambda: version)

    @cached_property
    def _send(self) -> set[str]:
        return usage_flags(self._usage("send"), "send")

    @cached_property
    def _receive_text(self) -> str:
        return self._usage("receive")

    @cached_property
    def _receive(self) -> set[str]:
        return usage_flags(self._receive_text, "receive")

    def _receive_takes(self, letter: str) -> bool:
        """`zfs receive -o property=value` / `-x property` (OpenZFS 0.7+)."""
        return re.search(rf"^\s*receive\s.*\[-{letter} <property>", self._receive_text, re.M) is not None

    @property
    def send_resume(self) -> bool:  # zfs send -t TOKEN
        return "t" in self._send

    @property
    def send_size(self) -> bool:  # zfs send -nP: what a send would be, in bytes
        return {"n", "P"} <= self._send

    @property
    def raw(self) -> bool:  # zfs send -w
        return "w" in self._send

    @property
    def props(self) -> bool:  # zfs send -p
        return "p" in self._send

    @property
    def compressed(self) -> bool:  # zfs send -c
        return "c" in self._send

    @property
    def large_blocks(self) -> bool:  # zfs send -L
        return "L" in self._send

    @property
    def embedded(self) -> bool:  # zfs send -e
        return "e" in self._send

    @property
    def receive_resume(self) -> bool:  # zfs receive -s and -A
        return {"s", "A"} <= self._receive

    @property
    def receive_u(self) -> bool:  # zfs receive -u: received, not mounted
        return "u" in self._receive

    @property
    def receive_o(self) -> bool:  # zfs receive -o PROP=VALUE
        return self._receive_takes("o")

    @property
    def receive_x(self) -> bool:  # zfs receive -x PROP
        return self._receive_takes("x")

    @property
    def resumable(self) -> bool:
        """Streams to and from this host resume (receive -s, send -t)."""
        return self.send_resume and self.receive_resume

    @cached_property
    def corrective(self) -> bool:
        """zfs receive -c (OpenZFS 2.2+): heal damaged blocks from a stream."""
        return self._version() >= (2, 2)

    def lists_fast(self) -> bool:
        """`zfs list -p` gives guid and createtxg (OpenZFS: what has resumable streams has it), read
        from whichever usage text was already asked (the send's where neither was)."""
        if "_receive" in self.__dict__ and "_send" not in self.__dict__:
            return self.receive_resume
        return self.send_resume


def delegations(text: str, user: str, groups: tuple[str, ...] = ()) -> set[str]:
    """Of `zfs allow DATASET`'s text: what applies to ``user`` on DATASET: its own local and
    local+descendent grants, and its parents' descendent and local+descendent ones (create-time
    permissions and set definitions are not grants)."""
    out: set[str] = set()
    block, section = 0, ""
    applies = {1: ("Local permissions", "Local+Descendent permissions"),
               2: ("Descendent permissions", "Local+Descendent permissions")}
    whom = {"everyone", f"user {user}"} | {f"group {g}" for g in groups}
    for line in text.splitlines():
        if line.startswith("---- Permissions on "):
            block, section = min(block + 1, 2), ""
        elif not line.startswith("\t"):
            section = line.strip().rstrip(":")
        elif block and section in applies[block]:
            parts = line.split()
            who = "everyone" if parts[0] == "everyone" else " ".join(parts[:2])
            if who in whom and len(parts) >= 2:
                out.update(parts[-1].split(","))
    return out
