"""What long commands print while they work: a rich progress bar on a terminal, plain lines
elsewhere (logs, journald), JSON lines for scripts. The engines report through these objects."""

from __future__ import annotations

import json
import os
import sys


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


class JsonEvents:
    """rebal rebalance --json: one line per event."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @staticmethod
    def _emit(d: dict) -> None:
        print(json.dumps(d), flush=True)

    def start(self, prep, total_files, total_bytes):
        self._emit({"event": "start", "pool": prep.pool.name, "method": prep.method, "jobs": prep.jobs,
                    "files": total_files, "bytes": total_bytes, "spread": round(prep.pool.spread, 2)})

    def file_done(self, ref, result):
        pass

    def dir_done(self, rep):
        self._emit({"event": "dir", "path": os.fsdecode(rep.path), "files": rep.files, "bytes": rep.bytes,
                    "skipped": rep.skipped, "spread": None if rep.spread is None else round(rep.spread, 2)})

    def measured(self, spread):
        pass

    def progress(self, files, nbytes):
        self._emit({"event": "progress", "files": files, "bytes": nbytes})

    def note(self, text):
        self._emit({"event": "note", "text": text})


class ProgressEvents:
    """rebal rebalance: a progress bar of bytes on a terminal; a line per directory otherwise."""

    def __init__(self, prep):
        self.prep = prep
        self.con = console()
        self.tty = self.con.is_terminal
        self.bar = None
        self.spread = prep.pool.spread

    def __enter__(self):
        if self.tty:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[files]} files"),
                DownloadColumn(binary_units=True), TransferSpeedColumn(), TimeRemainingColumn(),
                TextColumn("spread {task.fields[spread]}"), console=self.con,
            )
            self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)
        return False

    def start(self, prep, total_files, total_bytes):
        if self.bar:
            self.total_files, self.files_done = total_files, 0
            self.task = self.bar.add_task("rebalance", total=total_bytes, spread=f"{self.spread:.1f}",
                                               files=f"0/{total_files}")
        else:
            from ..units import human

            print(f"rebalance {prep.pool.name}: {total_files} files, {human(total_bytes)} eligible, "
                  f"spread {self.spread:.1f}, method {prep.method}, {prep.jobs} at once", flush=True)

    def file_done(self, ref, result):
        if self.bar:
            self.files_done += 1
            self.bar.update(self.task, advance=ref.size, files=f"{self.files_done}/{self.total_files}")

    def dir_done(self, rep):
        from ..units import human

        if rep.spread is not None:
            self.spread = rep.spread
        if self.bar:
            self.bar.update(self.task, spread=f"{self.spread:.1f}")
        else:
            sk = ", ".join(f"{n} {k}" for k, n in rep.skipped.items())
            print(f"{os.fsdecode(rep.path)}: {rep.files} files, {human(rep.bytes)}"
                  + (f", skipped {sk}" if sk else "") + f"; spread {self.spread:.1f}", flush=True)

    def measured(self, spread):
        self.spread = spread

    def progress(self, files, nbytes):  # method rewrite: the totals so far (no file_done per file)
        if self.bar:
            self.bar.update(self.task, completed=nbytes, files=f"{files}/{self.total_files}")

    def note(self, text):
        if self.bar:
            self.bar.console.print(f"note: {text}", markup=False)
        else:
            print(f"note: {text}", flush=True)


class ByteBar:
    """A bytes/rate bar on a terminal's stderr for replicate and restore; nothing elsewhere.
    Use as a context manager; `update(n)` sets the bytes done."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.bar = self.task = None
        self.enabled = enabled and sys.stderr.isatty()

    def __enter__(self) -> "ByteBar":
        if self.enabled:
            from rich.progress import (
                DownloadColumn,
                Progress,
                TextColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(TextColumn(f"[bold]{self.label}"), DownloadColumn(binary_units=True),
                                TransferSpeedColumn(), console=console(stderr=True), transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=None)
        return self

    def update(self, nbytes: int) -> None:
        if self.bar:
            self.bar.update(self.task, completed=nbytes)

    def __exit__(self, *exc) -> bool:
        if self.bar:
            self.bar.__exit__(*exc)
        return False
