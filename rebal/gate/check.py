"""The gate: an ssh forced command that lets a replication job do its work and nothing else.

On the backup host (push jobs), `authorized_keys` says
    command="rebal gate --receive-into backup/tank-data",restrict ssh-ed25519 AAAA... rebal@fileserver
and the file server's key can then list and receive under `backup/tank-data`, resume or abort a cut
receive, set `readonly=on`, snapshot (rsync `snapshot_target`) and run an rsync server into the
dataset's mount point. It cannot destroy, roll back (`receive -F` only with `--allow-rollback`),
rename, touch any other dataset, or start a shell. On the file server (pull jobs),
`rebal gate --send-from tank/data` lets the backup host snapshot, list, send, hold, release, bookmark
under `tank/data`, and destroy only rebal's own snapshots and bookmarks there (`@rebal-*`, `#rebal-*`:
retention of the source; never a dataset).

Every command line that arrives is hostile until proven otherwise: it is split here (never by a
shell), any shell syntax refuses it, every argument is checked against what rebal itself sends, and
the command is run from an argument list. A pipeline (`a | b`) is allowed only of rebal's own stream
filters (zstd, mbuffer) around `zfs receive` or `zfs send`, and is connected here, not by a shell.

`check()` is pure (tested without ssh or ZFS); `serve()` runs what `check()` allowed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass

from .. import names
from ..errors import RebalError
from ..zfs import argv as zargv

# the commands recognised in what arrives over ssh (read, never built here)
RECEIVES = (("zfs", "receive"), ("zfs", "recv"))
SEND = ("zfs", "send")
SNAPSHOT = ("zfs", "snapshot")
WRITES = (("zfs", "set"), ("zfs", "create"))  # on a receiving key: a property set, an empty parent made
POOL_SYNC = ("zpool", "sync")
USAGE_ASKS = (("zfs", "receive"), ("zfs", "recv"), ("zfs", "send"))  # a job's first question: the usage text
INFO = "rebal-gate-info"  # the probe a job sends to learn it talks to a gate (and what the gate allows)
# never in a command rebal sends: shell syntax, globbing, control characters
_SHELL = set("`$;&<>(){}[]*?~!\n\r\t\x00")
_TOKEN = re.compile(r"^[A-Za-z0-9-]{1,4096}$")
_SIZE = re.compile(r"^\d{1,12}[KMGkmg%]?$")
_PROP = re.compile(r"^[a-z][A-Za-z0-9_:.,@#-]{0,1023}$")  # (written@SNAP, written#BOOKMARK too)
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}$")
OWN_SNAPSHOT = re.compile(r"^rebal-[A-Za-z0-9][A-Za-z0-9_.-]*-\d{8}T\d{6}Z$")  # rebal's own snapshot names
# rsync --server: option letters before the 'e' capability string (no -s protect-args, which would
# hide the paths from this check; no -b/-K/-L/-k that follow or keep links or write backups elsewhere;
# no -D: device nodes and special files are never made on the backup host)
_RSYNC_SHORT = re.compile(r"^-[logtprHAXzvnxcuiIWOJUmqdS]+(e[.A-Za-z0-9]*)?$")
_RSYNC_LONG = {"--delete-delay", "--delete", "--delete-after", "--delete-during", "--stats", "--numeric-ids",
               "--inplace", "--mkpath", "--partial", "--no-implied-dirs", "--checksum", "--dry-run"}


class Refused(RebalError):
    exit_code = 2


@dataclass(frozen=True, slots=True)
class Policy:
    mode: str  # "receive" (a push job's target) or "send" (a pull job's source)
    root: str  # the dataset everything must be under
    allow_rollback: bool = False
    mountpoint: str | None = None  # receive mode: where an rsync server may write (resolved by serve)
    max_snapshots: int = 500  # rebal's own snapshots per dataset a key may make (serve.py counts)

    def __post_init__(self) -> None:
        if self.mode not in ("receive", "send"):
            raise ValueError(self.mode)
        names.dataset(self.root)

    def info(self) -> dict:
        return {"rebal_gate": 1, "mode": self.mode, "root": self.root, "allow_rollback": self.allow_rollback,
                "mountpoint": self.mountpoint, "filters": [f for f in ("zstd", "mbuffer") if shutil.which(f)],
                "verify": 1}  # rebal-gate-verify: a snapshot's inventory and hashes (verify.py)


def marker(text: str) -> dict | None:
    """The gate's answer inside a usage text (the line `rebal-gate-info {json}` it writes before the
    usage of `zfs receive` or `zfs send`), or None: no gate."""
    for line in text.splitlines():
        if line.startswith(INFO + " "):
            try:
                info = json.loads(line[len(INFO) + 1:])
            except ValueError:
                return None
            return info if isinstance(info, dict) and info.get("rebal_gate") else None
    return None


def split(line: str) -> list[list[str]]:
    """The command line as pipeline stages of argument lists; Refused if it holds shell syntax."""
    if not line or not line.strip():
        raise Refused("no command (this key runs only rebal's replication commands)")
    if len(line) > 65536:
        raise Refused("command line too long")
    bad = sorted({c for c in line if c in _SHELL or (ord(c) < 32) or ord(c) == 127})
    if bad:
        raise Refused(f"shell syntax or control characters are not allowed ({', '.join(repr(c) for c in bad)})")
    try:
        line.encode("ascii")
    except UnicodeEncodeError:
        raise Refused("only ASCII command lines are allowed") from None
    lex = shlex.shlex(line, posix=True, punctuation_chars="|")
    lex.whitespace_split = True
    stages: list[list[str]] = [[]]
    try:
        for w in lex:
            if w == "|":
                stages.append([])
            elif "|" in w:
                raise Refused("only a single '|' may join commands")
            else:
                stages[-1].append(w)
    except ValueError as e:  # an unclosed quote
        raise Refused(f"cannot split the command line: {e}") from None
    if any(not s for s in stages):
        raise Refused("an empty pipeline stage")
    return stages


def parse_opts(args: list[str], flags: str, valued: str) -> tuple[set[str], dict[str, str], list[str]]:
    """getopt-style: single-letter ``flags`` (may be clustered) and ``valued`` options (value in the
    same word or the next); returns (flags seen, values, positionals). Refused on anything else."""
    seen: set[str] = set()
    vals: dict[str, str] = {}
    pos: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1:
            if a.startswith("--"):
                raise Refused(f"option {a} is not allowed")
            j = 1
            while j < len(a):
                c = a[j]
                if c in valued:
                    v = a[j + 1:]
                    if not v:
                        i += 1
                        if i >= len(args):
                            raise Refused(f"option -{c} needs a value")
                        v = args[i]
                    if c in vals:
                        raise Refused(f"option -{c} given twice")
                    vals[c] = v
                    break
                if c not in flags:
                    raise Refused(f"option -{c} is not allowed here")
                seen.add(c)
                j += 1
        else:
            pos.append(a)
        i += 1
    return seen, vals, pos


def _under(policy: Policy, ds: str) -> str:
    problem = names.dataset_problem(ds)
    if problem:
        raise Refused(f"bad dataset name {ds!r}")
    if ds != policy.root and not ds.startswith(policy.root + "/"):
        raise Refused(f"{ds} is outside {policy.root}, the only dataset this key may use")
    return ds


def _snap(policy: Policy, name: str, sep: str = "@", own: str = "") -> tuple[str, str]:
    ds, s, snap = name.partition(sep)
    if not s or not snap or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*", snap) or len(name) > 255:
        raise Refused(f"bad {'snapshot' if sep == '@' else 'bookmark'} name {name!r}")
    _under(policy, ds)
    if own and not OWN_SNAPSHOT.fullmatch(snap):
        raise Refused(f"{name}: only rebal's own snapshots and bookmarks (rebal-<job>-<time>) may be {own}")
    return ds, snap


def token_target(policy: Policy, toname: str | None) -> None:
    """The snapshot a resume token would send (read from `zfs send -nvP -t TOKEN` by the serving side:
    a token is an opaque blob that can name any dataset) must lie under the root."""
    if not toname:
        raise Refused("zfs send -t: this zfs does not say what the token would send")
    _snap(policy, toname)


def _read(policy: Policy, sub: str, args: list[str]) -> None:
    """zfs get / list / holds: reading, under the root only (at least one dataset named)."""
    if sub == "get":
        seen, vals, pos = parse_opts(args, "Hpr", "odt")
        if not pos or not _PROP.fullmatch(pos[0]):
            raise Refused("zfs get needs a property list")
        targets = pos[1:]
    elif sub == "list":
        seen, vals, pos = parse_opts(args, "Hpr", "odtsS")
        targets = pos
    else:  # holds
        seen, vals, pos = parse_opts(args, "Hpr", "")
        targets = pos
    for k, v in vals.items():
        if k == "d" and not v.isdigit() or k != "d" and not _PROP.fullmatch(v):
            raise Refused(f"bad value for -{k}: {v!r}")
    if not targets:
        raise Refused(f"zfs {sub} must name a dataset under {policy.root}")
    for t in targets:
        _under(policy, re.split(r"[@#]", t, maxsplit=1)[0])
        if "@" in t or "#" in t:
            _snap(policy, t, "@" if "@" in t else "#")


def _filter(stage: list[str], receiving: bool) -> None:
    """zstd and mbuffer, as rebal puts them around a stream, and nothing else."""
    if stage[0] == "zstd":
        if receiving and stage[1:] in (["-dc"], ["-d", "-c"], ["-cd"]):
            return
        if not receiving and stage[1:2] == ["-c"] and all(re.fullmatch(r"-(T\d{1,3}|\d{1,2})", a) for a in stage[2:]):
            return
    if stage[0] == "mbuffer" and len(stage) == 4 and stage[1:3] == ["-q", "-m"] and _SIZE.fullmatch(stage[3]):
        return
    raise Refused(f"{shlex.join(stage)}: only zstd and mbuffer may be piped, as rebal uses them")


def _receive_mode(policy: Policy, argv: list[str]) -> None:
    if argv[:1] == ["rsync"]:
        return _rsync(policy, argv)
    if argv[0] != "zfs" or len(argv) < 2:
        raise Refused(f"{argv[0]}: not a command this key may run")
    sub, args = argv[1], argv[2:]
    if sub in ("receive", "recv"):
        if not args:
            return  # the usage text: how a job learns which flags this zfs has
        seen, vals, pos = parse_opts(args, "suvFA", "o")
        if len(pos) != 1:
            raise Refused("zfs receive takes exactly one target dataset")
        if vals.get("o", "readonly=on") != "readonly=on":
            raise Refused("zfs receive -o: only readonly=on is allowed")
        _under(policy, pos[0])
        if "A" in seen and (seen != {"A"} or vals):
            raise Refused("zfs receive -A takes no other option")
        if "F" in seen and not policy.allow_rollback:
            raise Refused("zfs receive -F (roll back and destroy newer snapshots) is not allowed: "
                          "start the gate with --allow-rollback to permit it")
        return None
    if sub in ("get", "list", "holds"):
        return _read(policy, sub, args)
    if sub == "set":
        if len(args) == 2 and args[0] == "readonly=on":
            _under(policy, args[1])
            return None
        raise Refused("zfs set: only readonly=on is allowed")
    if sub == "create":  # the empty parent of a chosen dataset whose own source is left out
        if len(args) == 3 and args[:2] == ["-o", "readonly=off"]:
            _under(policy, args[2])
            return None
        raise Refused("zfs create: only -o readonly=off DATASET (an empty parent) is allowed")
    if sub == "snapshot":
        if not args or any(a.startswith("-") for a in args):
            raise Refused("zfs snapshot: name snapshots under the root, no options")
        for a in args:
            _snap(policy, a, own="made")
        return None
    raise Refused(f"zfs {sub} is not allowed through this key")


def _rsync(policy: Policy, argv: list[str]) -> None:
    """An rsync server writing under the root dataset's mount point (never --sender: no reading)."""
    if argv[1:2] != ["--server"] or "--sender" in argv:
        raise Refused("rsync: only a receiving server (rsync --server ... . DEST) is allowed")
    if not policy.mountpoint:
        raise Refused(f"rsync: {policy.root} has no mount point to write into")
    args = argv[2:]
    pos: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--partial-dir" or a.startswith("--partial-dir="):
            v = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            i += 0 if "=" in a else 1
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", v) or v in (".", ".."):
                raise Refused("rsync: --partial-dir must be a plain relative name")
        elif a.startswith("--bwlimit="):
            if not _SIZE.fullmatch(a.split("=", 1)[1]):
                raise Refused("rsync: bad --bwlimit")
        elif a in _RSYNC_LONG:
            pass
        elif a.startswith("--"):
            raise Refused(f"rsync: option {a} is not allowed")
        elif a.startswith("-") and len(a) > 1:
            if not _RSYNC_SHORT.fullmatch(a):
                raise Refused(f"rsync: options {a} are not allowed (no -s, -b, -K, -L, -k)")
        else:
            pos.append(a)
        i += 1
    if len(pos) != 2 or pos[0] != "." or args[-2:] != pos:
        raise Refused("rsync: exactly '.' and one destination directory, after every option")
    dest = pos[1]
    mp = policy.mountpoint.rstrip("/")
    if not dest.startswith("/") or ".." in dest.split("/"):
        raise Refused("rsync: the destination must be an absolute path without '..'")
    real = os.path.realpath(dest)
    if not (real == os.path.realpath(mp) or real.startswith(os.path.realpath(mp) + "/")):
        raise Refused(f"rsync: {dest} is outside {mp}, the mount point of {policy.root}")


def _send_mode(policy: Policy, argv: list[str]) -> None:
    if tuple(argv[:2]) == POOL_SYNC:  # before `written@` is read: what a second old write made counts only once synced
        if argv[2:] != [policy.root.split("/")[0]]:
            raise Refused(f"zpool sync: only of {policy.root.split('/')[0]}, the pool of {policy.root}")
        return None
    if argv[0] != "zfs" or len(argv) < 2:
        raise Refused(f"{argv[0]}: not a command this key may run")
    sub, args = argv[1], argv[2:]
    if sub == "send":
        if not args:
            return None  # the usage text
        seen, vals, pos = parse_opts(args, "wcLenvPp", "iIt")
        if "t" in vals:
            if pos or set(vals) != {"t"} or not _TOKEN.fullmatch(vals["t"]) or seen - set("nvP"):
                raise Refused("zfs send -t takes a resume token and -n/-v/-P only")
            return None
        if len(pos) != 1:
            raise Refused("zfs send takes exactly one snapshot")
        ds, _ = _snap(policy, pos[0])
        for k in ("i", "I"):
            if k in vals:
                v = vals[k]
                if v.startswith("@"):
                    _snap(policy, ds + v)
                else:
                    _snap(policy, v, "#" if "#" in v else "@")
        return None
    if sub in ("get", "list", "holds"):
        return _read(policy, sub, args)
    if sub == "snapshot":
        seen, _, pos = parse_opts(args, "r", "")
        if not pos:
            raise Refused("zfs snapshot needs a snapshot name")
        for p in pos:
            _snap(policy, p, own="made")
        return None
    if sub in ("hold", "release"):
        seen, _, pos = parse_opts(args, "r", "")
        if len(pos) < 2 or not _TAG.fullmatch(pos[0]) or not pos[0].startswith("rebal-"):
            raise Refused(f"zfs {sub} TAG SNAPSHOT...: the tag is rebal-<job>")
        for p in pos[1:]:  # never the admin's own snapshots: a hold would keep them from being destroyed
            _snap(policy, p, own="held" if sub == "hold" else "released")
        return None
    if sub == "bookmark":
        if len(args) != 2:
            raise Refused("zfs bookmark SNAPSHOT BOOKMARK")
        _snap(policy, args[0])
        _snap(policy, args[1], "#")
        return None
    if sub == "destroy":
        seen, _, pos = parse_opts(args, "r", "")
        if len(pos) != 1 or ("@" not in pos[0] and "#" not in pos[0]):
            raise Refused("zfs destroy: only rebal's own snapshots and bookmarks, never a dataset")
        sep = "@" if "@" in pos[0] else "#"
        if sep == "#" and seen:
            raise Refused("zfs destroy -r of a bookmark is not allowed")
        ds, snaps = pos[0].split(sep, 1)
        for s in snaps.split(",") if sep == "@" else [snaps]:
            _snap(policy, f"{ds}{sep}{s}", sep, own="destroyed")
        return None
    raise Refused(f"zfs {sub} is not allowed through this key")


def send_token(stage: list[str]) -> str | None:
    """The resume token of an allowed `zfs send ... -t TOKEN` stage (however its flags are written:
    `-t TOK`, `-tTOK`, `-v -t TOK`), or None."""
    if tuple(stage[:2]) != SEND:
        return None
    _, vals, _ = parse_opts(stage[2:], "wcLenvPp", "iIt")
    return vals.get("t")


def snapshots_made(stage: list[str]) -> tuple[list[str], bool]:
    """The snapshots an allowed `zfs snapshot` stage would make, and whether with -r."""
    if tuple(stage[:2]) != SNAPSHOT:
        return [], False
    seen, _, pos = parse_opts(stage[2:], "r", "")
    return pos, "r" in seen


def rsync_destination(stage: list[str]) -> int | None:
    """The index in an allowed rsync stage of its destination (its last word), or None."""
    return len(stage) - 1 if stage[:2] == ["rsync", "--server"] else None


def check(policy: Policy, line: str) -> list[list[str]]:
    """The stages to run for ``line`` (SSH_ORIGINAL_COMMAND), or Refused with the reason."""
    stages = split(line)
    if stages == [[INFO]]:
        return stages
    if policy.mode == "receive":
        *filters, last = stages
        for f in filters:
            _filter(f, receiving=True)
        if filters and tuple(last[:2]) not in RECEIVES:
            raise Refused("a pipeline must end in zfs receive")
        _receive_mode(policy, last)
    else:
        first, *filters = stages
        for f in filters:
            _filter(f, receiving=False)
        if filters and tuple(first[:2]) != SEND:
            raise Refused("a pipeline must start with zfs send")
        _send_mode(policy, first)
    return stages


RECEIVE_APPEND = (2, 3, 2)  # `zfs allow ... receive:append`: receive, never -F (DESIGN.md fact 20)
SEND_ENCRYPTED = (2, 4, 0)  # `zfs allow ... send:encrypted`: raw sends of encrypted datasets only


def allow_set(mode: str, root: str, user: str, version: tuple[int, ...], raw: bool = False,
              rollback: bool = False) -> tuple[list[str], list[str]]:
    """The `zfs allow` command that lets ``user`` (a gated key's login, not root) do a job's work
    under ``root`` on a host whose zfs is ``version``, the least this zfs can express; and what an
    older one gives up."""
    names.dataset(root)
    problem = names.user_problem(user)
    if problem:
        raise RebalError(f"user {user!r}: {problem}", exit_code=2)
    shown = ".".join(map(str, version)) or "unknown"
    notes: list[str] = []
    if mode == "receive":
        if rollback:
            perms = ["receive", "create", "mount", "readonly"]
            notes.append("--allow-rollback: receive (not receive:append) lets the key roll the backup back, "
                         "destroying its newer snapshots")
        elif version >= RECEIVE_APPEND:
            perms = ["receive:append", "create", "mount", "readonly"]
        else:
            perms = ["receive", "create", "mount", "readonly"]
            notes.append(f"this zfs ({shown}) has no receive:append (OpenZFS 2.3.2+): the key's user may "
                         "receive -F, which rolls the backup back and destroys its newer snapshots; only "
                         "the gate refuses it")
    else:
        send = "send"
        if raw and version >= SEND_ENCRYPTED:
            send = "send:encrypted"
        elif raw:
            notes.append(f"this zfs ({shown}) has no send:encrypted (OpenZFS 2.4.0+): the key may also send "
                         "unencrypted (plain) streams")
        perms = [send, "snapshot", "hold", "release", "bookmark", "destroy", "mount"]
    return zargv.allow(user, perms, root), notes
