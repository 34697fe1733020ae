"""How a ZfsHost reaches its host (a Link: transport.Here or transport.Ssh) and where a remote
host's usage texts are kept between runs (Kept: state.Cache): the two things a ZfsHost is given."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from ..process.command import Result


class Kept(Protocol):
    """Where a remote host's usage texts are kept between runs (state.Cache)."""

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str) -> None: ...

    def forget(self, key: str) -> None: ...


class Link(Protocol):
    """How commands reach a host: transport.Here or transport.Ssh."""

    local: bool

    @property
    def where(self) -> str: ...

    def argv(self, *parts: list[str]) -> list[str]: ...

    def run(self, *parts: list[str], readonly: bool = True, dry_run: bool = False, check: bool = True,
            timeout: float | None = 300, input: str | bytes | None = None, stop: threading.Event | None = None,
            on_out: Callable[[bytes], None] | None = None) -> Result: ...
