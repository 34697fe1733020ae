"""The configuration file: TOML in, validated models out. Every error names the key and the file.

The models are dataclasses checked by `schema.py` (types, bounds, patterns, unknown and missing keys),
whose messages speak to an admin ("max_growth: give a size like 500G").
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import tzinfo
from typing import TYPE_CHECKING, Literal

from . import names
from .errors import ConfigError
from .schema import Model, spec, validate
from .units import size_problem

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

DEFAULT_PATH = "/etc/rebal/config.toml"
DEFAULT_STATE_DB = "/var/lib/rebal/state.db"


def config_path(explicit: str | None) -> tuple[str, bool]:
    """The file to read and whether the user named it (a missing named file is an error)."""
    if explicit:
        return explicit, True
    env = os.environ.get("REBAL_CONFIG")
    if env:
        return env, True
    return DEFAULT_PATH, False


def cron_trigger(expr: str, timezone: tzinfo | str | None = None) -> CronTrigger:
    """An APScheduler CronTrigger from a crontab expression: 5 fields (minute hour day month weekday),
    or 6 with a leading seconds field."""
    # lazy: only `config check` and the daemon pay
    from apscheduler.triggers.cron import CronTrigger

    fields = expr.split()
    if len(fields) == 5:
        return CronTrigger.from_crontab(expr, timezone=timezone)
    if len(fields) == 6:
        second, minute, hour, day, month, dow = fields
        return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month, day_of_week=dow,
                           timezone=timezone)
    raise ValueError(f"{expr!r} is not a cron expression of 5 fields (minute hour day month weekday)")


def cron_problem(expr: str) -> str | None:
    """None when ``expr`` is a valid cron expression, else why not."""
    if len(expr.split()) not in (5, 6):
        return f"{expr!r} is not a cron expression of 5 fields (minute hour day month weekday)"
    try:
        cron_trigger(expr, timezone="UTC")
    except ValueError as e:
        return f"{expr!r} is not a valid cron expression: {e}"
    return None



def _cron_problem(value: str, ctx: dict) -> str | None:
    return cron_problem(value) if ctx.get("check_cron", True) else None


HHMM = r"^([01]\d|2[0-3]):[0-5]\d$"


@dataclass(kw_only=True)
class Rebalance(Model):
    targets: list[str] = spec(factory=list)  # datasets or directories the scheduled rebalance works on
    target_spread: float = spec(10.0, gt=0, le=100)
    reserve_percent: float = spec(10.0, ge=0, lt=100)
    verify: Literal["hash", "size", "none"] = "hash"
    method: Literal["auto", "copy", "rewrite"] = "auto"
    jobs: int = spec(0, ge=0, le=64)  # 0: chosen from the number of data vdevs and cores
    allow_snapshots: bool = False
    max_growth: str | None = spec(None, check=size_problem)  # with allow_snapshots: the pool may grow this much
    hardlinks: bool = False
    exclude: list[str] = spec(factory=list)
    min_age_days: float = spec(0, ge=0)
    max_rate: str | None = spec(None, check=size_problem)  # bytes per second, e.g. "200M"
    steer: bool = True  # steer ZFS's allocator to the emptier vdevs while rewriting (where it can)


@dataclass(kw_only=True)
class Refresh(Model):
    # directories or datasets the scheduled refresh works on (data written under old properties);
    # verify, method, rate, snapshots and excludes come from [rebalance]
    targets: list[str] = spec(factory=list)
    max_bytes: str | None = spec(None, check=size_problem)  # rewrite at most this much a run


@dataclass(kw_only=True)
class Schedule(Model):
    fill: str | None = spec("*/15 * * * *", check_ctx=_cron_problem)
    health: str | None = spec("*/10 * * * *", check_ctx=_cron_problem)
    rebalance: str | None = spec(None, check_ctx=_cron_problem)
    rebalance_after: str | None = None  # a replication job: the rebalance runs right after its run lands
    rebalance_end: str | None = spec(None, pattern=HHMM, hint="give a time of day as HH:MM, like 06:30")
    refresh: str | None = spec(None, check_ctx=_cron_problem)  # `rebal refresh` of [refresh].targets
    refresh_end: str | None = spec(None, pattern=HHMM, hint="give a time of day as HH:MM, like 06:30")
    scrub: str | None = spec(None, check_ctx=_cron_problem)
    metrics: str | None = spec(None, check_ctx=_cron_problem)  # write metrics_file for node_exporter's textfile collector (e.g. "*/5 * * * *")


@dataclass(kw_only=True)
class Health(Model):
    cap_warning: float = spec(80, gt=0, le=100)
    cap_critical: float = spec(90, gt=0, le=100)
    replication_max_age_hours: float = spec(36, gt=0)
    scrub_max_age_days: float = spec(35, gt=0)
    verify_max_age_days: float = spec(35, gt=0)


@dataclass(kw_only=True)
class Email(Model):
    host: str = spec(check=names.host_problem)
    port: int = spec(587, gt=0, lt=65536)
    starttls: bool = True
    username: str | None = None
    password_file: str | None = None
    sender: str = spec(alias="from")
    to: list[str] = spec(min_items=1)
    # the server's certificate is verified against the system's CAs, or this file's (a private CA)
    ca_file: str | None = None
    # a login without TLS sends the password in clear: only when the config says so
    plain_login: bool = False

    def problems(self) -> list[tuple[str, str]]:
        if self.username and not self.starttls and not self.plain_login:
            return [("username", "starttls = false would send the password in clear: turn starttls on, or set "
                                 "plain_login = true if the mail server is on a link you trust")]
        return []


@dataclass(kw_only=True)
class Webhook(Model):
    url: str = spec(pattern=r"^https?://", hint="give an http:// or https:// address")


@dataclass(kw_only=True)
class Notify(Model):
    reminder_hours: float = spec(24, gt=0)
    email: Email | None = None
    webhook: Webhook | None = None
    command: list[str] | None = None


@dataclass(kw_only=True)
class Retention(Model):
    last: int = spec(1, ge=0)  # the newest N, whatever their times
    hourly: int = spec(24, ge=0)
    daily: int = spec(7, ge=0)
    weekly: int = spec(4, ge=0)
    monthly: int = spec(6, ge=0)


# The source keeps none of the job's snapshots beyond the next incremental's base: where the ZFS has
# bookmarks that base is a bookmark, so no snapshot stays and nothing pins the blocks a rebalance
# rewrites; without bookmarks (zfs-fuse) the base snapshot stays, held. History lives on the backup.
SOURCE_RETENTION = Retention(last=0, hourly=0, daily=0, weekly=0, monthly=0)


@dataclass(kw_only=True)
class Replicate(Model):
    RETIRED = {"backup_check_every": "every run asks the backup host whether it still holds each base "
                                     "(one command), so there is no window to set"}
    name: str = spec(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                     hint="give 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit")
    source: str = spec(check=names.dataset_problem)
    mode: Literal["zfs", "rsync"] = "zfs"
    # push: this host is the file server and sends to target_host; pull: this host is the backup
    # host and fetches from source_host (whose key may be gated: rebal gate --send-from)
    direction: Literal["push", "pull"] = "push"
    target_host: str | None = spec(None, check=names.host_problem)
    target_user: str = spec("root", check=names.user_problem)
    target_port: int = spec(22, gt=0, lt=65536)
    source_host: str | None = spec(None, check=names.host_problem)
    source_user: str = spec("root", check=names.user_problem)
    source_port: int = spec(22, gt=0, lt=65536)
    identity_file: str | None = None
    known_hosts: str | None = None
    target: str = spec()
    recursive: bool = False
    raw: bool = False
    compressed: bool = True
    large_blocks: bool = True
    embedded: bool = True
    bwlimit: str | None = spec(None, check=size_problem)  # bytes per second, e.g. "50M"
    stream_compress: Literal["none", "zstd"] = "none"
    stream_compress_level: int = spec(3, ge=1, le=19)  # zstd's level (1 fastest, 19 smallest)
    mbuffer: bool = False
    mbuffer_size: str = spec("128M", check=size_problem)  # each end's buffer
    ssh_options: list[str] = spec(factory=list, each=names.ssh_option_problem)  # "Ciphers=aes128-gcm@openssh.com"
    # which datasets of a recursive job (replicate/select.py): shell patterns on dataset names
    exclude: list[str] = spec(factory=list, each=names.pattern_problem)
    include: list[str] = spec(factory=list, each=names.pattern_problem)  # back in, under an excluded one
    by_property: bool = False  # the ZFS user property rebal:backup names the job (zfs_autobackup's way)
    # hooks: argument lists run without a shell (REBAL_JOB, REBAL_SNAPSHOT, REBAL_OUTCOME, ... set)
    pre_command: list[str] | None = spec(None, min_items=1)
    post_command: list[str] | None = spec(None, min_items=1)
    hook_timeout: int = spec(600, ge=1, le=86400)  # seconds
    # rebal health: a dataset whose newest snapshot on the target is older than this (default
    # health.replication_max_age_hours), or that was never replicated, is a finding
    snapshot_max_age_hours: float | None = spec(None, gt=0)
    snapshot_target: bool = False
    schedule: str | None = spec(None, check_ctx=_cron_problem)
    parallel: int = spec(0, ge=0, le=32)  # datasets sent at once; 0: twice the cores, at most 8
    keepalive: int = spec(10, ge=1, le=600)  # seconds between ssh keepalives; 3 missed = link down
    # dead-man pings (ping.py): POST URL/start, URL on success, URL/fail, as healthchecks.io takes them
    ping_url: str | None = spec(None, pattern=r"^https?://[^\s]+$", hint="give an http:// or https:// address")
    # the source keeps its last replicated snapshot beside the bookmark: a failback then sends only
    # the changes (recover/failback.py); it pins one run's changed blocks until the next run
    keep_base: bool = False
    retention_source: Retention = spec(factory=lambda: replace(SOURCE_RETENTION))
    retention_target: Retention = spec(factory=Retention)

    def problems(self) -> list[tuple[str, str]]:
        if self.mode == "zfs":
            problem = names.dataset_problem(self.target)
        else:
            problem = None if self.target.startswith("/") and "\n" not in self.target else \
                "an rsync target is an absolute directory"
        if problem:
            return [("target", problem)]
        if (self.exclude or self.include or self.by_property) and not self.recursive:
            return [("", "exclude, include and by_property choose among a recursive job's datasets: "
                         "set recursive = true")]
        if self.direction == "push":
            # no target_host: the target is on this host (a second pool, an external disk)
            if self.source_host is not None:
                return [("", "source_host is for direction = \"pull\"; a push job sends from this host")]
        else:
            if self.source_host is None:
                return [("", "a pull job needs source_host (the file server to fetch from)")]
            if self.target_host is not None:
                return [("", "target_host is for push jobs; a pull job receives on this host")]
            if self.mode != "zfs":
                return [("", "pull jobs replicate with zfs send/receive (mode = \"zfs\"); rsync pull is not built")]
        return []

    @property
    def remote_host(self) -> str | None:
        """The other end's host; None for a local target."""
        return self.target_host if self.direction == "push" else self.source_host

    @property
    def local_target(self) -> bool:
        return self.direction == "push" and self.target_host is None


@dataclass(kw_only=True)
class Config(Model):
    state_db: str = DEFAULT_STATE_DB
    # where the metrics schedule writes (Debian's prometheus-node-exporter reads this directory)
    metrics_file: str = "/var/lib/prometheus/node-exporter/rebal.prom"
    pools: list[str] = spec(factory=list, each=names.pool_problem)  # pools to watch; empty: every imported pool
    rebalance: Rebalance = spec(factory=Rebalance)
    refresh: Refresh = spec(factory=Refresh)
    schedule: Schedule = spec(factory=Schedule)
    health: Health = spec(factory=Health)
    notify: Notify = spec(factory=Notify)
    replicate: list[Replicate] = spec(factory=list)

    def problems(self) -> list[tuple[str, str]]:
        seen = set()
        for j in self.replicate:
            if j.name in seen:
                return [("replicate", f"two jobs are named {j.name!r}")]
            seen.add(j.name)
        after = self.schedule.rebalance_after
        if after is not None and self.job(after) is None:
            return [("", f"schedule.rebalance_after names {after!r}, which is no [[replicate]] job")]
        return []

    def job(self, name: str) -> Replicate | None:
        return next((j for j in self.replicate if j.name == name), None)


def parse(data: dict, path: str, *, check_cron: bool = True) -> Config:
    return validate(Config, data, path, {"check_cron": check_cron})


def load(explicit: str | None = None, *, check_cron: bool = False) -> Config:
    """Read the config file. Without a file named (option or REBAL_CONFIG) a missing default is fine."""
    path, named = config_path(explicit)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if named:
            raise ConfigError(path, ["no such file"]) from None
        return Config()
    except OSError as e:
        raise ConfigError(path, [f"cannot read: {e.strerror}"]) from None
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(path, ["not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, [f"not valid TOML: {e}"]) from None
    return parse(data, path, check_cron=check_cron)


def here_problems(cfg: Config) -> list[str]:
    """What a valid config names that this machine lacks, so that its scheduled jobs would fail
    every time: the metrics file's directory (with a metrics schedule), a job's ssh key or
    known_hosts file. Each names its key."""
    out = []
    if cfg.schedule.metrics and not os.path.isdir(os.path.dirname(cfg.metrics_file) or "."):
        out.append(f"metrics_file: {os.path.dirname(cfg.metrics_file)} does not exist, so the scheduled metrics "
                   "job fails every time (create it, install prometheus-node-exporter, or name another file)")
    for i, j in enumerate(cfg.replicate):  # named as the schema's problems are: replicate[INDEX].key
        for key in ("identity_file", "known_hosts"):
            path = getattr(j, key)
            if path and not os.path.exists(path):
                out.append(f"replicate[{i}].{key}: {path} does not exist (job {j.name})")
    return out
