"""`rebal watch`: the backup host watches for itself. A push job's file server keeps the
records of its runs; when it dies, or its timer stops, nothing on it says so. The backup host knows
what it holds without any config from the file servers: the datasets under the roots its gated keys
may receive into (`command="rebal gate --receive-into ROOT"` in authorized_keys), and the newest
snapshot of each. So the backup of several file servers, each with its own key and root, is watched
in one place: every dataset's newest snapshot against a maximum age, the pools that hold them, and
the gate's refusals since the last watch (a file server trying what its key may not do).

Findings and exit codes as `rebal health` (0 OK, 1 WARNING, 2 CRITICAL)."""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass, field

from . import health as H
from . import names
from .process.command import Runner, run

REFUSED = re.compile(r"refused from (\S+) \((\w+) ([^)]+)\): (.*)$")
KEY_TYPES = ("ssh-", "ecdsa-", "sk-")


@dataclass
class Root:
    dataset: str
    key: str  # the gated key's comment (which file server), or where the root was named
    datasets: dict[str, tuple[str, float] | None] = field(default_factory=dict)  # dataset -> newest (snap, created)
    failed_over: dict[str, str] = field(default_factory=dict)  # dataset -> since when the backup serves it


def gated_roots(text: str, source: str = "") -> list[Root]:
    """The roots of `rebal gate --receive-into ROOT` forced commands in an authorized_keys text."""
    out = []
    for line in text.splitlines():
        m = re.search(r'command="((?:[^"\\]|\\.)*)"', line)
        if not m or line.lstrip().startswith("#"):
            continue
        try:
            argv = shlex.split(m.group(1))
        except ValueError:
            continue
        if "gate" not in argv or "--receive-into" not in argv[:-1]:
            continue
        root = argv[argv.index("--receive-into") + 1]
        if names.dataset_problem(root):
            continue
        rest = line[m.end():].split()
        at = next((i for i, w in enumerate(rest) if w.startswith(KEY_TYPES)), None)
        comment = " ".join(rest[at + 2:]) if at is not None else ""
        out.append(Root(root, comment or source))
    return out


def age_findings(roots: list[Root], max_age_hours: float, now: float) -> list[H.Finding]:
    """Per root: datasets whose newest snapshot is older than the maximum, and leaves with none (a
    parent with children and no snapshot is a container, not a backup)."""
    out = []
    for r in roots:
        subject = f"backup:{r.dataset}" + (f" ({r.key})" if r.key else "")
        if not r.datasets:
            out.append(H.Finding(H.CRITICAL, subject, "the root is not there (its pool not imported, or destroyed)"))
            continue
        # a backup served by this host while its file server is down (`rebal failover`): said as
        # such, not as a late backup (it gets nothing until `rebal failback`)
        tops = sorted(d for d in r.failed_over if d.rsplit("/", 1)[0] not in r.failed_over)
        for d in tops:
            out.append(H.Finding(H.WARNING, subject, f"{d} is failed over since {r.failed_over[d]}: this host serves "
                                 "it and nothing backs it up; `rebal failback JOB` once its file server is back"))
        served = set(r.failed_over)
        old = sorted((d, p) for d, p in r.datasets.items()
                     if p is not None and d not in served and now - p[1] > max_age_hours * 3600)
        never = sorted(d for d, p in r.datasets.items()
                       if p is None and d not in served and not any(o.startswith(d + "/") for o in r.datasets))
        if old:
            named = ", ".join(f"{d} (@{p[0]}, {(now - p[1]) / 3600:.0f} h)" for d, p in old[:10])
            out.append(H.Finding(H.WARNING, subject, f"{len(old)} dataset(s) whose newest snapshot is older than "
                                 f"{max_age_hours:g} h: {named}" + (f" and {len(old) - 10} more" if len(old) > 10 else "")
                                 + ": has its file server stopped replicating?"))
        if never:
            out.append(H.Finding(H.WARNING, subject, f"{len(never)} dataset(s) hold no snapshot: {', '.join(never[:10])}"))
    return out


def refusals(lines: list[str], since: float) -> list[tuple[float, str, str]]:
    """(time, who, what) of each gate refusal logged after ``since``: the gate's own log file's lines
    ("2026-12-06 19:20:00,123 WARNING refused from ..."), or the journal's (`journalctl -o
    short-unix`: "1765048800.123456 host rebal-gate[pid]: refused from ...")."""
    from datetime import datetime

    out = []
    for ln in lines:
        m = REFUSED.search(ln)
        if not m:
            continue
        head = ln.split()
        try:
            if re.fullmatch(r"\d+\.\d+", head[0]):
                t = float(head[0])
            else:
                t = datetime.strptime(" ".join(head[:2]), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # (logging's asctime)
        except (ValueError, IndexError):
            continue
        if t > since:
            out.append((t, m.group(1), f"{m.group(3)}: {m.group(4)}"))
    return out


def gate_log_lines(files: list[str], since: float, runner: Runner = run) -> list[str]:
    """The gate's log since ``since``: its files, and the journal where journald keeps it."""
    lines: list[str] = []
    for f in files:
        try:
            with open(f, errors="replace") as fh:
                lines += fh.read().splitlines()
        except OSError:
            continue
    import shutil

    if shutil.which("journalctl") and os.path.exists("/run/systemd/journal"):
        r = runner(["journalctl", "-q", "-t", "rebal-gate", "-o", "short-unix", "--since", f"@{int(since)}"], check=False)
        if r.returncode == 0:
            lines += r.stdout.splitlines()
    return lines


def refusal_findings(found: list[tuple[float, str, str]]) -> list[H.Finding]:
    if not found:
        return []
    by: dict[str, list[str]] = {}
    for _t, who, what in found:
        by.setdefault(who, []).append(what)
    return [H.Finding(H.WARNING, f"gate:{who}", f"{len(w)} command(s) refused since the last watch, the last: "
                      f"{w[-1][:300]} (a file server trying what its key may not do: look at it)")
            for who, w in sorted(by.items())]


def now() -> float:
    return time.time()


def metrics_text(roots: list[Root], level: int, refused: int, max_age_hours: float, now: float) -> str:
    """The watch's figures for node_exporter's textfile collector (`rebal watch --metrics FILE`): each
    backup's newest snapshot's age, the maximum it is judged against, the leaves holding none, the
    gate's refusals since the last watch, the level, and when it was written."""
    from .metrics import _Doc

    d = _Doc()
    for r in roots:
        for ds, p in sorted(r.datasets.items()):
            if p is not None:
                d.add("rebal_watch_backup_age_seconds", "Age of the newest snapshot of a dataset under a gated root.",
                      round(now - p[1], 3), root=r.dataset, dataset=ds)
        none = [ds for ds, p in r.datasets.items() if p is None and not any(o.startswith(ds + "/") for o in r.datasets)]
        d.add("rebal_watch_datasets_without_snapshot", "Datasets under a gated root that hold no snapshot.",
              len(none), root=r.dataset)
    d.add("rebal_watch_backup_max_age_seconds", "The age past which a backup is a warning.", max_age_hours * 3600)
    d.add("rebal_watch_gate_refused", "Commands the gate refused since the previous watch.", refused)
    d.add("rebal_watch_level", "The watch's level: 0 OK, 1 warning, 2 critical.", level)
    d.add("rebal_watch_timestamp_seconds", "When the watch ran.", round(now, 3))
    return "\n".join(d.lines) + "\n"
