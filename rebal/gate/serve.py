"""Running what the gate allowed (check.py decides): logging, the receive's safety flags, the pipeline.

Every command, allowed or refused, is logged: to syslog (the journal) where /dev/log exists, and to
``--log FILE`` when given, one line each; with neither, to a file of its own (FALLBACK_LOG for root,
~/.local/state/rebal/gate.log for another user), so a refusal is never logged nowhere. A refusal
also prints one line on stderr for the job's side to show.

A receive never takes from the stream a property that would mount, share or run anything on the
backup host: `-x PROP` for each where this zfs's receive has -x (asked of zfs receive itself), and
where it has none (zfs-fuse) the receive is made unmounted and each such property the stream set is
inherited again before anything can mount it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from dataclasses import replace

from .. import names
from ..process.pipeline import connect
from ..errors import RebalError
from ..transport import Here
from ..zfs.host import ZfsHost
from . import rsync as gate_rsync
from .check import INFO, RECEIVES, SNAPSHOT, USAGE_ASKS, WRITES, Policy, Refused, check, rsync_destination, send_token, split
from .verify import VERIFY, check_verify, serve_verify

# properties a hostile stream could set on the backup host (mount it over /etc, setuid binaries)
UNSAFE_PROPS = ("mountpoint", "canmount", "sharenfs", "sharesmb", "setuid", "exec", "devices", "overlay")
_NO_X = ("mountpoint", "canmount", "sharenfs", "sharesmb", "setuid", "exec", "devices")  # zfs-fuse has no overlay
FALLBACK_LOG = "/var/log/rebal/gate.log"

log = logging.getLogger(__name__)


def _fallback_log() -> str:
    if os.geteuid() == 0:
        return FALLBACK_LOG
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "rebal", "gate.log")


def _setup_log(path: str | None) -> None:
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(logging.NullHandler())  # never stderr: the job reads it
    have = False
    if os.path.exists("/dev/log"):
        try:
            h = logging.handlers.SysLogHandler(address="/dev/log")
            h.setFormatter(logging.Formatter("rebal-gate: %(message)s"))
            log.addHandler(h)
            have = True
        except OSError:
            pass
    if path is None and not have:
        path = _fallback_log()
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        except OSError:
            return
    if path:
        try:
            h2 = logging.FileHandler(path)
        except OSError:
            return
        h2.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h2)


def _zfs() -> ZfsHost:
    """This host's ZFS, as the gate asks it (the one door, zfs/host.py)."""
    return ZfsHost(Here())


def _mountpoint(root: str) -> str | None:
    try:
        return _zfs().mountpoint(root)
    except RebalError:
        return None


def _info(policy: Policy) -> dict:
    """The gate's answer to a job's probe, and on a receiving end whose user is not root, whether that
    user may only append (`zfs allow ... receive:append`, OpenZFS 2.3.2+: no receive -F, so the key
    cannot roll the backup back): then a job's --force-rollback is refused up front, naming it."""
    info = policy.info()
    if policy.mode == "receive" and os.geteuid() != 0:
        import grp
        import pwd

        pw = pwd.getpwuid(os.geteuid())
        groups = tuple(g.gr_name for g in grp.getgrall() if pw.pw_name in g.gr_mem) + (grp.getgrgid(pw.pw_gid).gr_name,)
        try:
            perms = _zfs().delegated(policy.root, pw.pw_name, groups)
        except RebalError:  # the probe answers anyway; the receive itself says what is missing
            perms = set()
        info["user"] = pw.pw_name
        info["append_only"] = "receive:append" in perms and "receive" not in perms
    return info


def harden(stages: list[list[str]], has_x: bool) -> tuple[list[list[str]], bool]:
    """A receive that is not -A and not the usage text, as the gate runs it; and whether the unsafe
    properties must be inherited again after it (no -x: it is made -u, so nothing mounts meanwhile).
    Only for a gate running as root: a delegated user cannot set these properties at all (on Linux
    mountpoint, canmount and the shares cannot be delegated), and zfs refuses it `-x` of them too."""
    last = stages[-1]
    if not (tuple(last[:2]) in RECEIVES and len(last) > 2 and "-A" not in last) or os.geteuid() != 0:
        return stages, False
    if has_x:
        extra = [a for p in UNSAFE_PROPS for a in ("-x", p)]
        return stages[:-1] + [last[:-1] + extra + last[-1:]], False
    extra = [] if "-u" in last[2:-1] else ["-u"]
    return stages[:-1] + [last[:-1] + extra + last[-1:]], True


def reset_received(target: str) -> list[str]:
    """After a receive without -x: each unsafe property the stream set under ``target`` inherited
    again (the received value stays recorded, not effective). Returns what was reset."""
    zfs, done = _zfs(), []
    for ds, prop in zfs.received(_NO_X, target):
        try:
            zfs.inherit(ds, prop)
        except RebalError as e:  # said in the log: the next receive's reset tries again
            log.error("could not inherit %s on %s again: %s", prop, ds, e)
            continue
        done.append(f"{ds} {prop}")
    return done


def _snapshot_room(policy: Policy, stage: list[str]) -> None:
    """A flood of snapshots through a gate would pin the other host's space: at most
    ``policy.max_snapshots`` of rebal's own per dataset."""
    from .check import OWN_SNAPSHOT, snapshots_made

    made, recursive = snapshots_made(stage)
    for snap in made:
        ds = snap.split("@", 1)[0]
        counts: dict[str, int] = {}
        for name in _zfs().snapshot_names(ds, recursive=recursive):
            d, _, s = name.partition("@")
            if s and OWN_SNAPSHOT.fullmatch(s):
                counts[d] = counts.get(d, 0) + 1
        full = sorted(d for d, n in counts.items() if n >= policy.max_snapshots)
        if full:
            raise Refused(f"{full[0]} already has {counts[full[0]]} of rebal's snapshots (the gate's limit, "
                          f"--max-snapshots {policy.max_snapshots}): prune them there first")


def _written(policy: Policy, stages: list[list[str]], rsync: bool) -> list[str]:
    """The datasets a receiving key's command would write into (none for a read or the usage text)."""
    if rsync:
        return [policy.root]
    last, first = stages[-1], stages[0]
    if tuple(last[:2]) in RECEIVES and len(last) > 2 and "-A" not in last:
        return [last[-1]]
    if tuple(first[:2]) == SNAPSHOT:
        return [a.split("@", 1)[0] for a in first[2:]]
    if tuple(first[:2]) in WRITES:
        return [first[-1]]
    return []


def _not_failed_over(policy: Policy, datasets: list[str]) -> None:
    """A backup served while its file server is down (`rebal failover`) takes nothing from a key: a
    file server that comes back must not receive over, or roll back, what was written there."""
    zfs = _zfs()
    for ds in datasets:
        at = ds
        while True:  # a dataset still to be made: its nearest parent says
            try:
                since = zfs.values(at, [names.FAILOVER_PROPERTY], recursive=False).get(at, {}).get(names.FAILOVER_PROPERTY)
                break
            except RebalError:
                if at == policy.root or "/" not in at:
                    since = None
                    break
                at = at.rsplit("/", 1)[0]
        if since not in (None, "", "-"):
            raise Refused(f"{ds} is failed over since {since} (rebal failover on this host): it takes no receive "
                          "until `rebal failback` there")


def _refuse(policy: Policy, who: str, shown: str, e: Refused) -> int:
    log.warning("refused from %s (%s %s): %s: %s", who, policy.mode, policy.root, shown, e)
    sys.stderr.write(f"rebal gate: refused: {e}\n")
    return 2


def serve(policy: Policy, line: str | None, log_path: str | None = None, who: str = "") -> int:
    """Check ``line`` (SSH_ORIGINAL_COMMAND) and run it; returns the exit status."""
    _setup_log(log_path)
    who = who or os.environ.get("SSH_CONNECTION", "local").split(" ")[0]
    shown = (line or "")[:300].encode("unicode_escape").decode("ascii")
    needs_mp = policy.mode == "receive" and line is not None and (line.strip() == INFO or line.lstrip().startswith("rsync"))
    if needs_mp:
        policy = replace(policy, mountpoint=_mountpoint(policy.root))
    rsync_fd = None
    notes: list[str] = []
    try:
        if line is None:
            raise Refused("no command: this key runs only rebal's replication commands (an interactive login is refused)")
        if line.lstrip().startswith(VERIFY + " "):  # a snapshot's inventory and hashes, read here
            name = check_verify(policy, split(line))
            log.info("allowed from %s (%s %s): %s", who, policy.mode, policy.root, shown)
            return serve_verify(name, sys.stdin.buffer, sys.stdout.buffer)
        stages = check(policy, line)
        token = send_token(stages[0]) if policy.mode == "send" else None
        if token is not None:
            _check_token(policy, token)
        _snapshot_room(policy, stages[0])
        if policy.mode == "receive":
            _not_failed_over(policy, _written(policy, stages, rsync_destination(stages[-1]) is not None))
        if rsync_destination(stages[-1]) is not None:
            assert policy.mountpoint  # check() refused an rsync line without one
            stage, rsync_fd, notes = gate_rsync.prepare(stages[-1], policy.mountpoint)
            stages = [stage]
    except Refused as e:
        return _refuse(policy, who, shown, e)
    log.info("allowed from %s (%s %s): %s%s", who, policy.mode, policy.root, shown,
             "".join(f" [{n}]" for n in notes))
    if stages == [[INFO]]:
        sys.stdout.write(json.dumps(_info(policy)) + "\n")
        return 0
    if len(stages) == 1 and tuple(stages[0]) in USAGE_ASKS:
        # the usage text a job asks for first: it learns the gate from the same round trip
        sys.stderr.write(f"{INFO} {json.dumps(_info(policy))}\n")
        sys.stderr.flush()
    reset = False
    if policy.mode == "receive" and rsync_fd is None:
        stages, reset = harden(stages, os.geteuid() == 0 and _zfs().receive_excludes(policy.root))
    if rsync_fd is not None:
        try:
            gate_rsync.enter(rsync_fd, policy.mountpoint or "/")
        except Refused as e:
            return _refuse(policy, who, shown, e)
    t0 = time.monotonic()
    rc = connect(stages, replace_self=not reset)  # (replacing: this line is not reached)
    log.info("pipeline ended after %.1f s: exit %s", time.monotonic() - t0, rc)
    if reset:
        done = reset_received(stages[-1][-1])
        if done:
            log.warning("properties the stream set, inherited again (this zfs's receive has no -x): %s",
                        ", ".join(done))
    return rc


def _check_token(policy: Policy, token: str) -> None:
    """A resume token names what it sends, and a hostile one could name any dataset. libzfs finds
    the snapshot to send by the token's toguid (searching from toname's dataset up to the pool), not
    by toname: ask zfs (dry run) what the token holds, and allow it only when toname lies under the
    root and is the very snapshot whose guid the token carries."""
    from .check import token_target

    zfs = _zfs()
    info = zfs.token_sends(token)
    token_target(policy, info.toname if info else None)
    assert info is not None
    guid = zfs.guid(info.toname)
    if info.toguid is None or guid is None or guid != info.toguid:
        raise Refused(f"zfs send -t: the token names {info.toname} but carries another snapshot's guid")
