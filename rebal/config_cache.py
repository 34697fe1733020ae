"""The validated config kept beside the exact bytes it came from, so that a command whose config file
has not changed neither parses the TOML nor validates it again, nor imports what those need
(tomllib and typing: about 0.1 s of every command's start in the lane's OpenZFS guest, where a small
`zfs rewrite` rebalance's whole fixed cost is about 1.4 s; issue 19).

What makes an entry valid: the file's bytes, compared whole (not a hash of them); the file's path;
whether cron expressions were checked; rebal's version, Python's, and the size and modification time
of the modules that validate (config.py, schema.py, record.py, names.py and this one). Any
difference is a miss: the file is parsed and validated as before and the entry rewritten.

Only for root (the services and an admin's commands), in a directory that root owns and nobody else
can write: systemd's CacheDirectory= ($CACHE_DIRECTORY) under the shipped units, else
/var/cache/rebal; REBAL_CACHE_DIR names another, and an empty REBAL_CACHE_DIR turns the cache off.
An entry not owned by root, writable by others, unreadable or not in this module's format is
ignored. The entry is marshal data (no pickle: loading it runs no code), and its records are rebuilt
only from classes of rebal.config, through their constructors. Nothing here ever fails a command:
a cache that cannot be read or written is only not used.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys

FORMAT = 1
DEFAULT_DIR = "/var/cache/rebal"
_CODE = ("config.py", "schema.py", "record.py", "names.py", "config_cache.py")


def cache_dir() -> str | None:
    """Where entries live; None where there is no cache (not root, or turned off)."""
    if os.geteuid() != 0:
        return None
    d = os.environ.get("REBAL_CACHE_DIR")
    if d is None:
        d = os.environ.get("CACHE_DIRECTORY", "").split(":")[0] or DEFAULT_DIR
    return d or None


def _entry(d: str, path: str) -> str | None:
    name = "config-" + os.path.abspath(path).replace("%", "%25").replace("/", "%2F")
    return os.path.join(d, name) if len(os.fsencode(name)) <= 240 else None


def _key(path: str, raw: bytes, check_cron: bool) -> tuple:
    from . import __version__

    here = os.path.dirname(os.path.abspath(__file__))
    code = []
    for name in _CODE:
        st = os.stat(os.path.join(here, name))
        code.append((st.st_size, st.st_mtime_ns))
    return (FORMAT, __version__, sys.version, os.path.abspath(path), bool(check_cron), tuple(code), raw)


def _safe(st: os.stat_result, kind: int) -> bool:
    """Root's, of the kind expected, and not writable by group or others."""
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == 0 and not st.st_mode & 0o022


def lookup(path: str, raw: bytes, check_cron: bool):
    """The Config of an earlier validation of exactly these bytes, or None."""
    d = cache_dir()
    entry = d and _entry(d, path)
    if not entry:
        return None
    try:
        if not _safe(os.lstat(d), stat.S_IFDIR):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not _safe(os.fstat(f.fileno()), stat.S_IFREG):
                return None
            key, tree = marshal.loads(f.read())
        if key != _key(path, raw, check_cron):
            return None
        return _decode(tree)
    except (OSError, ValueError, EOFError, TypeError, KeyError, AttributeError):
        return None  # not this format, or from other code: parsed as if there were no entry


def store(path: str, raw: bytes, check_cron: bool, cfg) -> bool:
    """Keep ``cfg`` for the next command that reads these bytes; False where it could not."""
    d = cache_dir()
    entry = d and _entry(d, path)
    if not entry:
        return False
    try:
        data = marshal.dumps((_key(path, raw, check_cron), _encode(cfg)))
    except (TypeError, ValueError, OSError):
        return False  # a value marshal cannot keep (none in today's config): no entry
    tmp = f"{entry}.{os.getpid()}.tmp"
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        if not _safe(os.lstat(d), stat.S_IFDIR):
            return False
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, entry)  # whole or not at all; a torn entry (a crash) fails its key and is a miss
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


# records, lists, dicts and tuples of plain values, as marshal can keep them: a record is
# ("r", its class's name in rebal.config, {field: value}), a tuple ("t", [items])

def _encode(v):
    from .record import is_record

    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, list):
        return [_encode(x) for x in v]
    if isinstance(v, dict):
        return {_encode(k): _encode(x) for k, x in v.items()}
    if type(v) is tuple:
        return ("t", [_encode(x) for x in v])
    if is_record(v) and not isinstance(v, type) and type(v).__module__ == "rebal.config":
        names = type(v).__record_spec__[0]
        return ("r", type(v).__qualname__, {n: _encode(v.__dict__[n]) for n in names})
    raise TypeError(f"cannot keep a {type(v).__name__} in the config cache")


def _decode(v):
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if isinstance(v, dict):
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, tuple):
        tag, body = v[0], v[1:]
        if tag == "t":
            return tuple(_decode(x) for x in body[0])
        if tag == "r":
            from . import config

            name, values = body
            cls = config.__dict__[name]
            if not isinstance(cls, type) or not hasattr(cls, "__record_spec__"):
                raise TypeError(name)
            return cls(**{n: _decode(x) for n, x in values.items()})
        raise ValueError(tag)
    return v
