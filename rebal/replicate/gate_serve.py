"""Running what the gate allowed (gate.py decides): logging, the receive's safety flags, the pipeline.

Every command, allowed or refused, is logged: to syslog (the journal) where /dev/log exists, and to
``--log FILE`` when given, one line each. A refusal also prints one line on stderr for the job's
side to show.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time

from ..process.command import run
from ..process.pipeline import connect
from ..zfs import argv as zargv
from .gate import INFO, Policy, Refused, check

# properties a hostile stream could set on the backup host (mount it over /etc, setuid binaries)
_UNSAFE_PROPS = ("mountpoint", "canmount", "sharenfs", "sharesmb", "setuid", "exec", "devices")

log = logging.getLogger(__name__)


def _setup_log(path: str | None) -> None:
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(logging.NullHandler())  # no syslog and no --log: nothing (never stderr, the job reads it)
    if os.path.exists("/dev/log"):
        try:
            h = logging.handlers.SysLogHandler(address="/dev/log")
            h.setFormatter(logging.Formatter("rebal-gate: %(message)s"))
            log.addHandler(h)
        except OSError:
            pass
    if path:
        h2 = logging.FileHandler(path)
        h2.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h2)


def _mountpoint(root: str) -> str | None:
    r = run(zargv.mountpoint(root), check=False)
    mp = r.stdout.strip()
    return mp if r.returncode == 0 and mp.startswith("/") else None


def _info(policy: Policy) -> dict:
    """The gate's answer to a job's probe, and on a receiving end whose user is not root, whether that
    user may only append (`zfs allow ... receive:append`, OpenZFS 2.3.2+: no receive -F, so the key
    cannot roll the backup back): then a job's --force-rollback is refused up front, naming it."""
    info = policy.info()
    if policy.mode == "receive" and os.geteuid() != 0:
        import grp
        import pwd

        from ..errors import RebalError
        from ..zfs.host import ZfsHost
        from .transport import Here

        pw = pwd.getpwuid(os.geteuid())
        groups = tuple(g.gr_name for g in grp.getgrall() if pw.pw_name in g.gr_mem) + (grp.getgrgid(pw.pw_gid).gr_name,)
        try:
            perms = ZfsHost(Here()).delegated(policy.root, pw.pw_name, groups)
        except RebalError:  # the probe answers anyway; the receive itself says what is missing
            perms = set()
        info["user"] = pw.pw_name
        info["append_only"] = "receive:append" in perms and "receive" not in perms
    return info


def _receive_excludes() -> list[str]:
    """`-x PROP` for each unsafe property, where this zfs's receive has -x (OpenZFS 0.7+; zfs-fuse has
    none): a stream's own value of them is ignored, as if the sender had not sent it. Only for a gate
    running as root: a delegated user cannot set these properties at all (on Linux mountpoint,
    canmount and the shares cannot be delegated), and zfs refuses it `-x` of them as well."""
    if os.geteuid() != 0:
        return []
    r = run(zargv.usage("receive"), check=False)
    if "-x property" not in r.stdout + r.stderr:
        return []
    return [a for p in _UNSAFE_PROPS for a in ("-x", p)]


def harden(stages: list[list[str]]) -> list[list[str]]:
    """A receive that is not -A and not the usage text gets the -x excludes before its target."""
    last = stages[-1]
    if tuple(last[:2]) in zargv.RECEIVES and len(last) > 2 and "-A" not in last:
        return stages[:-1] + [last[:-1] + _receive_excludes() + last[-1:]]
    return stages


def serve(policy: Policy, line: str | None, log_path: str | None = None, who: str = "") -> int:
    """Check ``line`` (SSH_ORIGINAL_COMMAND) and run it; returns the exit status."""
    _setup_log(log_path)
    who = who or os.environ.get("SSH_CONNECTION", "local").split(" ")[0]
    shown = (line or "")[:300].encode("unicode_escape").decode("ascii")
    needs_mp = policy.mode == "receive" and line is not None and (line.strip() == INFO or line.lstrip().startswith("rsync"))
    if needs_mp:
        policy = Policy(policy.mode, policy.root, policy.allow_rollback, _mountpoint(policy.root))
    try:
        if line is None:
            raise Refused("no command: this key runs only rebal's replication commands (an interactive login is refused)")
        stages = check(policy, line)
    except Refused as e:
        log.warning("refused from %s (%s %s): %s: %s", who, policy.mode, policy.root, shown, e)
        sys.stderr.write(f"rebal gate: refused: {e}\n")
        return 2
    if policy.mode == "send" and "-t" in stages[0][:3]:
        try:
            _check_token(policy, stages[0])
        except Refused as e:
            log.warning("refused from %s (%s %s): %s: %s", who, policy.mode, policy.root, shown, e)
            sys.stderr.write(f"rebal gate: refused: {e}\n")
            return 2
    log.info("allowed from %s (%s %s): %s", who, policy.mode, policy.root, shown)
    if stages == [[INFO]]:
        sys.stdout.write(json.dumps(_info(policy)) + "\n")
        return 0
    if len(stages) == 1 and tuple(stages[0]) in zargv.USAGE_ASKS:
        # the usage text a job asks for first: it learns the gate from the same round trip
        sys.stderr.write(f"{INFO} {json.dumps(_info(policy))}\n")
        sys.stderr.flush()
    if policy.mode == "receive":
        stages = harden(stages)
    t0 = time.monotonic()
    rc = connect(stages)  # (one stage: rebal's process becomes the command, and this line is not reached)
    log.info("pipeline ended after %.1f s: exit %s", time.monotonic() - t0, rc)
    return rc


def _check_token(policy: Policy, argv: list[str]) -> None:
    """A resume token names what it sends, and a hostile one could name any dataset: ask zfs (dry
    run) which snapshot it is, and allow it only under the root."""
    from .gate import token_target
    from .policy import parse_token_check

    token = argv[argv.index("-t") + 1]
    r = run(zargv.send_resume(token, estimate=True), check=False)
    info = parse_token_check(r.stdout + r.stderr) if r.returncode == 0 else None
    token_target(policy, info.toname if info else None)
