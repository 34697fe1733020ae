"""What long commands print while they work: a rich progress bar on a terminal, plain lines
elsewhere (logs, journald), JSON lines for scripts. The engines report through these objects."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, Task, TaskID

    from ..rebalance.files import FileRef, Result
    from ..rebalance.prepare import Prepared
    from ..rebalance.runstate import DirReport
    from ..replicate.zfs_run import DatasetReport


def console(stderr: bool = False, whole_lines: bool = True):
    """A terminal's width where it is one; into a file or a pipe, with ``whole_lines``, each line
    whole (rich would wrap them at 80 columns), unless COLUMNS says otherwise. (A progress bar's
    console keeps rich's own width: a bar stretches to it.)"""
    import os
    import sys

    from rich.console import Console

    tty = (sys.stderr if stderr else sys.stdout).isatty()
    if tty or not whole_lines or os.environ.get("COLUMNS"):
        return Console(stderr=stderr, highlight=False)
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


class JsonEvents:
    """rebal rebalance --json: one line per event."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        return

    @staticmethod
    def _emit(d: dict) -> None:
        print(json.dumps(d), flush=True)

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None:
        self._emit({"event": "start", "pool": prep.pool.name, "method": prep.method, "jobs": prep.jobs,
                    "files": total_files, "bytes": total_bytes, "spread": round(prep.pool.spread, 2)})

    def file_done(self, ref: FileRef, result: Result) -> None:
        pass

    def dir_done(self, rep: DirReport) -> None:
        self._emit({"event": "dir", "path": os.fsdecode(rep.path), "files": rep.files, "bytes": rep.bytes,
                    "skipped": rep.skipped, "spread": None if rep.spread is None else round(rep.spread, 2)})

    def measured(self, spread: float) -> None:
        pass

    def progress(self, files: int, nbytes: int) -> None:
        self._emit({"event": "progress", "files": files, "bytes": nbytes})

    def note(self, text: str) -> None:
        self._emit({"event": "note", "text": text})


class ProgressEvents:
    """rebal rebalance: a progress bar of bytes on a terminal; a line per directory otherwise."""

    def __init__(self, prep: Prepared, con: Console | None = None) -> None:
        self.prep = prep
        self.con = con or console()
        self.tty = self.con.is_terminal
        self.bar: Progress | None = None
        self.spread = prep.pool.spread

    def __enter__(self):
        if self.tty:
            from rich.progress import BarColumn, Progress, TextColumn

            # one line within 80 columns, sizes and rates in rebal's units (120M, 1.5G; 80M/s)
            self.bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(bar_width=10), TextColumn("{task.fields[files]}"),
                *_byte_columns(estimate=False), TextColumn("spread {task.fields[spread]}"), console=self.con,
            )
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar:
            self.bar.__exit__(*exc)

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None:
        if self.bar:
            self.total_files, self.files_done = total_files, 0
            self.task = self.bar.add_task("rebalance", total=total_bytes, spread=f"{self.spread:.1f}",
                                          files=f"0/{total_files}")
        else:
            from ..units import human

            print(f"rebalance {prep.pool.name}: {total_files} files, {human(total_bytes)} eligible, "
                  f"spread {self.spread:.1f}, method {prep.method}, {prep.jobs} at once", flush=True)

    def file_done(self, ref: FileRef, result: Result) -> None:
        if self.bar:
            self.files_done += 1
            self.bar.update(self.task, advance=ref.size, files=f"{self.files_done}/{self.total_files}")

    def dir_done(self, rep: DirReport) -> None:
        from ..units import human

        if rep.spread is not None:
            self.spread = rep.spread
        if self.bar:
            self.bar.update(self.task, spread=f"{self.spread:.1f}")
        else:
            sk = ", ".join(f"{n} {k}" for k, n in rep.skipped.items())
            print(f"{os.fsdecode(rep.path)}: {rep.files} files, {human(rep.bytes)}"
                  + (f", skipped {sk}" if sk else "") + f"; spread {self.spread:.1f}", flush=True)

    def measured(self, spread: float) -> None:
        self.spread = spread

    def progress(self, files: int, nbytes: int) -> None:  # method rewrite: the totals so far (no file_done per file)
        if self.bar:
            self.bar.update(self.task, completed=nbytes, files=f"{files}/{self.total_files}")

    def note(self, text: str) -> None:
        if self.bar:
            self.bar.console.print(f"note: {text}", markup=False)
        else:
            print(f"note: {text}", flush=True)


class LineEvents:
    """rebal refresh: a line on stderr per directory done and per note, and the measurement's progress
    at most every few seconds (the block pointers of a big tree take a while to read)."""

    def __init__(self, every: float = 5.0) -> None:
        self.every, self.last = every, 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        return

    @staticmethod
    def _line(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def measuring(self, done: int, total: int) -> None:
        import time

        now = time.monotonic()
        if done == total or now - self.last >= self.every:
            self.last = now
            self._line(f"block pointers read: {done} of {total} file(s)")

    def start(self, prep: Prepared, total_files: int, total_bytes: int) -> None:
        from ..units import human

        self._line(f"rewriting {total_files} file(s), {human(total_bytes)}, by {prep.method}")

    def file_done(self, ref: FileRef, result: Result) -> None:
        pass

    def dir_done(self, rep: DirReport) -> None:
        from ..units import human

        if rep.files:
            self._line(f"{os.fsdecode(rep.path)}: {rep.files} file(s), {human(rep.bytes)}")

    def measured(self, spread: float) -> None:
        pass

    def progress(self, files: int, nbytes: int) -> None:
        pass

    def note(self, text: str) -> None:
        self._line(f"note: {text}")


class ByteBar:
    """A bytes/rate bar on a terminal's stderr for replicate and restore; nothing elsewhere.
    Use as a context manager; `update(n, total)` sets the bytes done and, where known, the total
    (zfs send -nP's estimate: an estimate, it overstates after `zfs rewrite -P`, so the bar says so).
    Sizes as everywhere in rebal (1.5G, 120M); the rate from the second second on, so a first
    update of bytes sent before the bar saw them does not read as 170 GB/s."""

    def __init__(self, label: str, enabled: bool = True, every: float = 60.0) -> None:
        self.label = label
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.enabled = enabled and sys.stderr.isatty()
        # no terminal (a log, journald): a line every ``every`` seconds instead of a bar
        self.lines = enabled and not self.enabled
        self.every, self.last = every, 0.0
        self.t0: float | None = None

    def __enter__(self) -> "ByteBar":
        if self.enabled:
            from rich.progress import Progress, TextColumn

            self.bar = Progress(TextColumn(f"[bold]{self.label}"), *_byte_columns(), console=console(stderr=True, whole_lines=False),
                                transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=None)
        return self

    def dataset(self, rep: DatasetReport) -> None:
        """A dataset done: a line of its own where there is no bar (a log reads what each took)."""
        if self.lines:
            from ..units import human

            err = f": {rep.error}" if rep.error else ""
            print(f"{self.label}: {rep.source}: {rep.kind}, {human(rep.bytes)} in {rep.seconds:.1f} s{err}",
                  file=sys.stderr, flush=True)

    @property
    def wanted(self) -> bool:
        """Whether updates are shown at all (a bar, or lines)."""
        return self.enabled or self.lines

    def update(self, nbytes: int, total: int | None = None) -> None:
        if self.bar and self.task is not None:
            self.bar.update(self.task, completed=nbytes, total=max(total, nbytes) if total else None)
        elif self.lines:
            import time

            from ..units import human

            now = time.monotonic()
            if self.t0 is None:
                self.t0 = self.last = now
            if now - self.last >= self.every:
                self.last = now
                of = f" of {human(max(total, nbytes))} (estimate)" if total else ""
                print(f"{self.label}: {human(nbytes)}{of} sent, {human(nbytes / max(now - self.t0, 1e-9))}/s",
                      file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self.bar:
            self.bar.__exit__(*exc)


def _byte_columns(estimate: bool = True):
    """Bytes done of the total (``estimate``: zfs send -nP's), the mean rate from the second second
    on, the time left: in rebal's own units."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    from ..units import human

    class Bytes(ProgressColumn):
        def render(self, task: Task) -> Text:
            total = (f"{human(task.total)} (estimate)" if estimate else human(task.total)) if task.total else "?"
            return Text(f"{human(task.completed)} of {total}")

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            t = task.elapsed or 0
            return Text(f"{human(task.completed / t)}/s" if t >= 1 else "-/s")

    class Left(ProgressColumn):
        def render(self, task: Task) -> Text:
            t = task.elapsed or 0
            if not task.total or t < 1 or not task.completed:
                return Text("")
            left = max(0.0, (task.total - task.completed) / (task.completed / t))
            return Text(f"{'about ' if estimate else ''}{int(left // 60)}:{int(left % 60):02d} left")

    return Bytes(), Rate(), Left()
