"""Prometheus text exposition for node_exporter's textfile collector, written atomically.

A replication job's label is `replication_job`, not `job`: Prometheus gives every scraped series its
own `job` label (the scrape job), and would rename ours to `exported_job`."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import CannotWrite
from .zfs.model import Pool


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Doc:
    """Samples grouped by metric family (the text format wants each family's lines together)."""

    def __init__(self) -> None:
        self.families: dict[str, tuple[str, list[str]]] = {}
        self.samples: list[dict] = []  # the same, for --json

    def add(self, name: str, help_: str, value: float, **labels: str) -> None:
        self.samples.append({"name": name, "labels": {k: str(v) for k, v in labels.items()}, "value": value})
        lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items())
        line = f"{name}{{{lab}}} {value:.10g}" if lab else f"{name} {value:.10g}"
        self.families.setdefault(name, (help_, []))[1].append(line)

    @property
    def lines(self) -> list[str]:
        out = []
        for name, (help_, samples) in self.families.items():
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", *samples]
        return out


HEALTH = {"ONLINE": 0, "DEGRADED": 1, "FAULTED": 2, "OFFLINE": 2, "UNAVAIL": 2, "REMOVED": 2, "SUSPENDED": 2}


def render(pools: list[Pool], health_level: dict[str, int], replication: list[dict], rebalance: list[dict], *,
           scrubs: dict[str, float] | None = None, created: dict[str, float] | None = None,
           limits: dict | None = None, now: float | None = None) -> str:
    """The Prometheus text of `document`."""
    return "\n".join(document(pools, health_level, replication, rebalance, scrubs=scrubs, created=created,
                               limits=limits, now=now).lines) + "\n"


def document(pools: list[Pool], health_level: dict[str, int], replication: list[dict], rebalance: list[dict], *,
             scrubs: dict[str, float] | None = None, created: dict[str, float] | None = None,
             limits: dict | None = None, now: float | None = None) -> _Doc:
    """Every family a dashboard or an alert rule needs (contrib/): the figures, and the limits they
    are judged against (target spread, scrub and replication ages), so rules need no constants."""
    import time

    d = _Doc()
    limits = limits or {}
    d.add("rebal_metrics_timestamp_seconds", "When rebal wrote these metrics (stale when old).",
          time.time() if now is None else now)
    if "scrub_max_age_days" in limits:
        d.add("rebal_scrub_max_age_seconds", "A scrub is overdue after this long (health.scrub_max_age_days).",
              limits["scrub_max_age_days"] * 86400)
    for p in pools:
        if "target_spread" in limits:
            d.add("rebal_pool_target_spread_points", "The spread target (rebalance.target_spread).",
                  limits["target_spread"], pool=p.name)
        if created and p.name in created:
            d.add("rebal_pool_created_timestamp_seconds", "When the pool was made.", created[p.name], pool=p.name)
        if scrubs and p.name in scrubs:
            d.add("rebal_pool_last_scrub_timestamp_seconds", "End of the pool's last scrub.", scrubs[p.name],
                  pool=p.name)
        d.add("rebal_pool_size_bytes", "Pool size.", p.size, pool=p.name)
        d.add("rebal_pool_alloc_bytes", "Pool allocated bytes.", p.alloc, pool=p.name)
        d.add("rebal_pool_spread_points", "Max minus min CAP of the data vdevs, percentage points.", p.spread, pool=p.name)
        d.add("rebal_pool_health", "Pool state: 0 ONLINE, 1 DEGRADED, 2 FAULTED/UNAVAIL/other.",
              HEALTH.get(p.health, 2), pool=p.name, state=p.health)
        if p.name in health_level:
            d.add("rebal_health_level", "Highest health finding: 0 OK, 1 WARNING, 2 CRITICAL.", health_level[p.name],
                  pool=p.name)
        for v in p.data_vdevs:
            d.add("rebal_vdev_size_bytes", "Data vdev size.", v.size, pool=p.name, vdev=v.name)
            d.add("rebal_vdev_alloc_bytes", "Data vdev allocated bytes.", v.alloc, pool=p.name, vdev=v.name)
            d.add("rebal_vdev_capacity_percent", "Data vdev CAP.", v.cap, pool=p.name, vdev=v.name)
    for r in replication:
        d.add("rebal_replication_succeeded_ever", "1 once the job has succeeded at least once, 0 before.",
              0 if r["last_success"] is None else 1, replication_job=r["job"])
        if "replication_max_age_hours" in limits:
            d.add("rebal_replication_max_age_seconds", "A job's last success is too old after this long "
                  "(health.replication_max_age_hours).", limits["replication_max_age_hours"] * 3600, replication_job=r["job"])
        if r["last_success"] is not None:
            d.add("rebal_replication_last_success_timestamp_seconds", "End of the last successful run.",
                  r["last_success"], replication_job=r["job"])
            d.add("rebal_replication_last_bytes", "Bytes sent by the last successful run.", r.get("bytes") or 0,
                  replication_job=r["job"])
        pts = r.get("points")
        if pts is not None:
            d.add("rebal_replication_snapshot_max_age_seconds", "A dataset's newest snapshot on the target is too "
                  "old after this long (the job's snapshot_max_age_hours).", pts["max_age_hours"] * 3600,
                  replication_job=r["job"])
            d.add("rebal_replication_datasets_never_replicated", "Datasets the job chooses that have no snapshot "
                  "on the target yet.", sum(1 for p in pts["datasets"].values() if p is None), replication_job=r["job"])
            for ds, p in sorted(pts["datasets"].items()):
                if p is not None:
                    d.add("rebal_replication_dataset_snapshot_timestamp_seconds", "When the newest snapshot a "
                          "dataset has on the target was taken.", p[1], replication_job=r["job"], dataset=ds)
    for rb in rebalance:
        d.add("rebal_rebalance_running", "1 while a rebalance run is going.", 1 if rb["running"] else 0, pool=rb["pool"])
        d.add("rebal_rebalance_bytes", "Bytes rewritten by the latest rebalance run.", rb["bytes"], pool=rb["pool"])
        d.add("rebal_rebalance_files", "Files rewritten by the latest rebalance run.", rb["files"], pool=rb["pool"])
    return d


@contextmanager
def atomic_file(path: str) -> Iterator[Callable[[str], None]]:
    """A writer of a file beside ``path`` that replaces it when the block ends (the collector never
    reads half a file), or is removed if the block fails. Opened first, so a place that cannot be
    written is said before any metric is computed. Only the file's own failures are said as
    CannotWrite: an error of the block's other work (a pool or the state) goes on as it is."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".rebal-metrics-", suffix=".tmp")
    except OSError as e:
        raise CannotWrite.of("the metrics file", path, e) from None
    in_block = True
    try:
        with os.fdopen(fd, "w") as f:
            def put(text: str) -> None:
                try:
                    f.write(text)
                except OSError as e:
                    raise CannotWrite.of("the metrics file", path, e) from None
            yield put
            in_block = False
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError) and not in_block:
            raise CannotWrite.of("the metrics file", path, e) from None
        raise

