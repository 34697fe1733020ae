"""Validation of the names rebal passes to zfs, zpool, ssh and rsync.

Names are checked before any command is built, so a typo or a hostile value never reaches a
command line: a leading '-' would be read as an option, and '@', '#', spaces or control characters
change meaning. The rules follow zfs(8) component names (letters, digits, `_-.:` and space are legal
there, but rebal also refuses space to keep ssh command lines simple).
"""

from __future__ import annotations

import ipaddress
import re

from .errors import UsageError

_COMPONENT = r"[A-Za-z0-9_][A-Za-z0-9_.:-]*"  # a dataset part or a snapshot name
POOL = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
DATASET = re.compile(rf"[A-Za-z][A-Za-z0-9_.:-]*(?:/{_COMPONENT})*")
SNAPNAME = re.compile(_COMPONENT)
HOST = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
RESERVED_POOLS = re.compile(r"(mirror|raidz|spare|log|cache|special|dedup|draid)\d*")
MAX_NAME = 255


def pool_problem(name: str) -> str | None:
    if not POOL.fullmatch(name):
        return "a pool name starts with a letter and holds only letters, digits and _ - . :"
    if RESERVED_POOLS.fullmatch(name):
        return f"{name!r} is a reserved word in ZFS, not a pool name"
    if len(name) > MAX_NAME:
        return "a pool name is at most 255 characters"
    return None


def dataset_problem(name: str) -> str | None:
    if len(name) > MAX_NAME:
        return "a dataset name is at most 255 characters"
    if not DATASET.fullmatch(name):
        return "a dataset name is pool/path with letters, digits and _ - . : in each part"
    if any(part in (".", "..") for part in name.split("/")):
        return "'.' and '..' are not dataset name parts"
    return pool_problem(name.split("/", 1)[0])


def snapshot_problem(name: str) -> str | None:
    ds, sep, snap = name.partition("@")
    if not sep:
        return "a snapshot name is dataset@name"
    return dataset_problem(ds) or (None if SNAPNAME.fullmatch(snap) else "a snapshot name after @ has letters, digits and _ - . :")


def host_problem(name: str) -> str | None:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return None
    except ValueError:
        pass
    return None if HOST.fullmatch(name) else "a host is a DNS name or an IP address"


def user_problem(name: str) -> str | None:
    return None if USER.fullmatch(name) else "a user name has lower-case letters, digits, _ - . and starts with a letter or _"


def _check(kind: str, problem: str | None, name: str) -> str:
    if problem:
        raise UsageError(f"bad {kind} name {name!r}: {problem}")
    return name


def pool(name: str) -> str:
    return _check("pool", pool_problem(name), name)


def dataset(name: str) -> str:
    return _check("dataset", dataset_problem(name), name)


def snapshot(name: str) -> str:
    return _check("snapshot", snapshot_problem(name), name)


def host(name: str) -> str:
    return _check("host", host_problem(name), name)
