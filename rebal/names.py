"""Validation of the names rebal passes to zfs, zpool, ssh and rsync.

Names are checked before any command is built, so a typo or a hostile value never reaches a
command line: a leading '-' would be read as an option, and '@', '#', spaces or control characters
change meaning. The rules follow zfs(8) component names (letters, digits, `_-.:` and space are legal
there, but rebal also refuses space to keep ssh command lines simple).
"""

from __future__ import annotations

from .errors import UsageError

# pool and dataset names are checked with str methods, not regular expressions: the rules are short,
# and `rebal rebalance` checks a name before it starts its first zfs queries, where importing and
# compiling `re` (about 60 ms in the lane's guest) came first (issue 19). tests/unit/test_names.py
# holds these checks to the regular expressions of zfs(8)'s rules on generated names.
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_FIRST = frozenset(_LETTERS + "0123456789_")  # a dataset part or a snapshot name starts with one of these
_LEGAL = frozenset(_LETTERS + "0123456789_.:-")  # and holds only these
_RE: dict = {}  # host and user patterns, compiled when first asked
_HOST = r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
_USER = r"^[a-z_][a-z0-9_.-]{0,31}$"
_RESERVED_POOLS = ("mirror", "raidz", "spare", "log", "cache", "special", "dedup", "draid")
MAX_NAME = 255


def _pattern(p: str):
    if p not in _RE:
        import re

        _RE[p] = re.compile(p)
    return _RE[p]


def _component(part: str, first: frozenset | str = _FIRST) -> bool:
    """A non-empty name part: its first character in ``first``, every other one legal."""
    return bool(part) and part[0] in first and _LEGAL.issuperset(part)


def pool_problem(name: str) -> str | None:
    if not _component(name, _LETTERS):
        return "a pool name starts with a letter and holds only letters, digits and _ - . :"
    if any(name == r or (name.startswith(r) and name[len(r):].isdigit()) for r in _RESERVED_POOLS):
        return f"{name!r} is a reserved word in ZFS, not a pool name"
    if len(name) > MAX_NAME:
        return "a pool name is at most 255 characters"
    return None


def dataset_problem(name: str) -> str | None:
    if len(name) > MAX_NAME:
        return "a dataset name is at most 255 characters"
    pool, _sep, rest = name.partition("/")
    if not _component(pool, _LETTERS) or (_sep and not all(_component(p) for p in rest.split("/"))):
        return "a dataset name is pool/path with letters, digits and _ - . : in each part"
    if any(part in (".", "..") for part in name.split("/")):
        return "'.' and '..' are not dataset name parts"
    return pool_problem(name.split("/", 1)[0])


def snapshot_problem(name: str) -> str | None:
    ds, sep, snap = name.partition("@")
    if not sep:
        return "a snapshot name is dataset@name"
    return dataset_problem(ds) or (None if _component(snap) else "a snapshot name after @ has letters, digits and _ - . :")


def host_problem(name: str) -> str | None:
    try:
        import ipaddress  # only host names need it

        ipaddress.ip_address(name.strip("[]"))
        return None
    except ValueError:
        pass
    return None if _pattern(_HOST).fullmatch(name) else "a host is a DNS name or an IP address"


def user_problem(name: str) -> str | None:
    return None if _pattern(_USER).fullmatch(name) else "a user name has lower-case letters, digits, _ - . and starts with a letter or _"


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
