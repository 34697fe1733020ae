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
BACKUP_PROPERTY = "rebal:backup"  # a dataset's own say in a recursive job (replicate/select.py)
FAILOVER_PROPERTY = "rebal:failover"  # a backup served while its file server is down (recover/failover.py)
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


PATTERN = re.compile(r"[A-Za-z0-9_.:*?\[\]!/-]{1,255}")


def pattern_problem(p: str) -> str | None:
    """A dataset name pattern (fnmatch): the characters of dataset names and * ? [ ] !."""
    return None if PATTERN.fullmatch(p) else "a pattern holds dataset name characters and * ? [ ] (like tank/*/cache)"


# ssh -o options a job may set (ssh_config(5)). Nothing that runs a command (ProxyCommand,
# LocalCommand), weakens the host key check (StrictHostKeyChecking, UserKnownHostsFile) or the
# batch mode, or that rebal sets itself per run (ControlPath, ServerAlive*, ConnectTimeout).
SSH_OPTIONS = {
    "addressfamily", "bindaddress", "ciphers", "clearallforwardings", "compression", "controlmaster",
    "forwardagent", "forwardx11", "hostkeyalgorithms", "hostkeyalias", "ipqos", "kexalgorithms", "macs",
    "proxyjump", "rekeylimit", "tcpkeepalive", "requesttty", "preferredauthentications", "pubkeyacceptedalgorithms",
}
_SSH_VALUE = re.compile(r"[A-Za-z0-9@.,:_+=/-]{1,512}")


def ssh_option_problem(opt: str) -> str | None:
    key, sep, value = opt.partition("=")
    if not sep or not key or not value:
        return "an ssh option is Key=Value, like Ciphers=aes128-gcm@openssh.com"
    if key.lower() not in SSH_OPTIONS:
        return (f"{key} is not an ssh option rebal passes on (allowed: "
                f"{', '.join(sorted(SSH_OPTIONS))}); host key checking, batch mode and commands stay rebal's")
    if not _SSH_VALUE.fullmatch(value):
        return "an ssh option's value holds letters, digits and @ . , : _ + = / -"
    if key.lower() == "controlmaster" and value.lower() not in ("no", "yes", "auto"):
        return "ControlMaster is yes (rebal's one connection per run, the default) or no"
    if key.lower() == "proxyjump" and value.lower() != "none":
        hosts = [h.rpartition("@")[2].split(":")[0] for h in value.split(",")]
        if any(host_problem(h) for h in hosts):
            return "ProxyJump names [user@]host[:port] hops"
    return None
