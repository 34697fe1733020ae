"""The configuration file: TOML in, validated models out. Every error names the key and the file."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from . import names
from .errors import ConfigError

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


def cron_trigger(expr: str, timezone=None):
    """An APScheduler CronTrigger from a crontab expression: 5 fields (minute hour day month weekday),
    or 6 with a leading seconds field."""
    from apscheduler.triggers.cron import CronTrigger  # lazy: only `config check` and the daemon pay

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


def _check_cron(value: str | None, info: ValidationInfo) -> str | None:
    if value is not None and (info.context or {}).get("check_cron", True):
        problem = cron_problem(value)
        if problem:
            raise ValueError(problem)
    return value


def _named(problem_fn):
    def check(value: str) -> str:
        problem = problem_fn(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


Cron = Annotated[str | None, AfterValidator(_check_cron)]
Dataset = Annotated[str, _named(names.dataset_problem)]
PoolName = Annotated[str, _named(names.pool_problem)]
Host = Annotated[str, _named(names.host_problem)]
User = Annotated[str, _named(names.user_problem)]
HHMM = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Rebalance(Strict):
    targets: list[str] = []  # datasets or directories the scheduled rebalance works on
    target_spread: float = Field(10.0, gt=0, le=100)
    reserve_percent: float = Field(10.0, ge=0, lt=100)
    verify: Literal["hash", "size", "none"] = "hash"
    method: Literal["auto", "copy", "rewrite"] = "auto"
    jobs: int = Field(0, ge=0, le=64)  # 0: chosen from the number of data vdevs and cores
    allow_snapshots: bool = False
    max_growth: str | None = Field(None, pattern=r"^\d+(\.\d+)?[KMGTkmgt]?$")  # with allow_snapshots: the pool may grow this much
    hardlinks: bool = False
    exclude: list[str] = []
    min_age_days: float = Field(0, ge=0)
    max_rate: str | None = None  # e.g. "200M" per second


class Schedule(Strict):
    fill: Cron = "*/15 * * * *"
    health: Cron = "*/10 * * * *"
    rebalance: Cron = None
    rebalance_after: str | None = None  # a replication job: the rebalance runs right after its run lands
    rebalance_end: HHMM | None = None
    scrub: Cron = None
    metrics: Cron = None  # write metrics_file for node_exporter's textfile collector (e.g. "*/5 * * * *")


class Health(Strict):
    cap_warning: float = Field(80, gt=0, le=100)
    cap_critical: float = Field(90, gt=0, le=100)
    replication_max_age_hours: float = Field(36, gt=0)
    scrub_max_age_days: float = Field(35, gt=0)
    verify_max_age_days: float = Field(35, gt=0)


class Email(Strict):
    host: Host
    port: int = Field(587, gt=0, lt=65536)
    starttls: bool = True
    username: str | None = None
    password_file: str | None = None
    sender: str = Field(alias="from")
    to: list[str] = Field(min_length=1)


class Webhook(Strict):
    url: str = Field(pattern=r"^https?://")


class Notify(Strict):
    reminder_hours: float = Field(24, gt=0)
    email: Email | None = None
    webhook: Webhook | None = None
    command: list[str] | None = None


class Retention(Strict):
    last: int = Field(1, ge=0)  # the newest N, whatever their times
    hourly: int = Field(24, ge=0)
    daily: int = Field(7, ge=0)
    weekly: int = Field(4, ge=0)
    monthly: int = Field(6, ge=0)


# The source keeps none of the job's snapshots beyond the next incremental's base: where the ZFS has
# bookmarks that base is a bookmark, so no snapshot stays and nothing pins the blocks a rebalance
# rewrites; without bookmarks (zfs-fuse) the base snapshot stays, held. History lives on the backup.
SOURCE_RETENTION = Retention(last=0, hourly=0, daily=0, weekly=0, monthly=0)


class Replicate(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    source: Dataset
    mode: Literal["zfs", "rsync"] = "zfs"
    # push: this host is the file server and sends to target_host; pull: this host is the backup
    # host and fetches from source_host (whose key may be gated: rebal gate --send-from)
    direction: Literal["push", "pull"] = "push"
    target_host: Optional[Host] = None
    target_user: User = "root"
    target_port: int = Field(22, gt=0, lt=65536)
    source_host: Optional[Host] = None
    source_user: User = "root"
    source_port: int = Field(22, gt=0, lt=65536)
    identity_file: str | None = None
    known_hosts: str | None = None
    target: str
    recursive: bool = False
    raw: bool = False
    compressed: bool = True
    large_blocks: bool = True
    embedded: bool = True
    bwlimit: str | None = Field(None, pattern=r"^\d+[KMGkmg]?$")
    stream_compress: Literal["none", "zstd"] = "none"
    mbuffer: bool = False
    snapshot_target: bool = False
    schedule: Cron = None
    keepalive: int = Field(10, ge=1, le=600)  # seconds between ssh keepalives; 3 missed = link down
    retention_source: Retention = SOURCE_RETENTION
    retention_target: Retention = Retention()

    @field_validator("target")
    @classmethod
    def _target(cls, v: str, info: ValidationInfo) -> str:
        if info.data.get("mode", "zfs") == "zfs":
            problem = names.dataset_problem(v)
        else:
            problem = None if v.startswith("/") and "\n" not in v else "an rsync target is an absolute directory"
        if problem:
            raise ValueError(problem)
        return v


    @model_validator(mode="after")
    def _ends(self) -> "Replicate":
        if self.direction == "push":
            if self.target_host is None:
                raise ValueError("a push job needs target_host (the backup host)")
            if self.source_host is not None:
                raise ValueError("source_host is for direction = \"pull\"; a push job sends from this host")
        else:
            if self.source_host is None:
                raise ValueError("a pull job needs source_host (the file server to fetch from)")
            if self.target_host is not None:
                raise ValueError("target_host is for push jobs; a pull job receives on this host")
            if self.mode != "zfs":
                raise ValueError("pull jobs replicate with zfs send/receive (mode = \"zfs\"); rsync pull is not built")
        return self

    @property
    def remote_host(self) -> str:
        return self.target_host if self.direction == "push" else self.source_host


class Config(Strict):
    state_db: str = DEFAULT_STATE_DB
    # where the metrics schedule writes (Debian's prometheus-node-exporter reads this directory)
    metrics_file: str = "/var/lib/prometheus/node-exporter/rebal.prom"
    pools: list[PoolName] = []  # pools to watch; empty: every imported pool
    rebalance: Rebalance = Rebalance()
    schedule: Schedule = Schedule()
    health: Health = Health()
    notify: Notify = Notify()
    replicate: list[Replicate] = []

    @field_validator("replicate")
    @classmethod
    def _unique_jobs(cls, jobs: list[Replicate]) -> list[Replicate]:
        seen = set()
        for j in jobs:
            if j.name in seen:
                raise ValueError(f"two jobs are named {j.name!r}")
            seen.add(j.name)
        return jobs

    @model_validator(mode="after")
    def _chained(self) -> Config:
        after = self.schedule.rebalance_after
        if after is not None and self.job(after) is None:
            raise ValueError(f"schedule.rebalance_after names {after!r}, which is no [[replicate]] job")
        return self

    def job(self, name: str) -> Replicate | None:
        return next((j for j in self.replicate if j.name == name), None)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-plain") or str(part).startswith(("function-", "str", "int")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _message(err: dict) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def parse(data: dict, path: str, *, check_cron: bool = True) -> Config:
    try:
        return Config.model_validate(data, context={"check_cron": check_cron})
    except ValidationError as e:
        problems = []
        for err in e.errors():
            problems.append(f"{_loc(err['loc'])}: {_message(err)}")
        raise ConfigError(path, sorted(set(problems), key=problems.index)) from None


def load(explicit: str | None = None, *, check_cron: bool = False) -> Config:
    """Read the config file. Without a file named (option or REBAL_CONFIG) a missing default is fine."""
    path, named = config_path(explicit)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        if named:
            raise ConfigError(path, ["no such file"]) from None
        return Config()
    except OSError as e:
        raise ConfigError(path, [f"cannot read: {e.strerror}"]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(path, ["not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, [f"not valid TOML: {e}"]) from None
    return parse(data, path, check_cron=check_cron)
