"""`rebal keys JOB`: the mechanical part of a first backup (docs/first-backup.md). The job's own ssh
key (made where it is missing), the other host's key (its fingerprints shown; pinned in the job's
known_hosts only when the admin gives the fingerprint they checked out of band: rebal never trusts a
host key on first sight), the authorized_keys line that lets the job's key in there, gated to what
the job needs (`rebal gate`), optionally appended there over the admin's own ssh, and a dry run of
the job to prove the whole way."""

from __future__ import annotations

import os
import shlex
import socket
import tempfile
from dataclasses import dataclass, field

from .. import names
from ..config import Replicate
from ..errors import RebalError, UsageError
from ..process.command import run


@dataclass
class Pairing:
    job: str
    host: str | None  # the other end (None: a local target, nothing to pair)
    key: str = ""  # the job's identity file
    key_made: bool = False
    public: str = ""
    fingerprints: list[str] = field(default_factory=list)  # the other host's keys as scanned now
    pinned: bool = False  # the job's known_hosts holds a key of the host
    pinned_now: bool = False
    line: str = ""  # for authorized_keys on the other host
    where: str = ""  # whose authorized_keys: the backup host's (push) or the file server's (pull)
    installed: bool | None = None  # None: not asked
    installed_to: str = ""  # user@host:file it was added to (or found in)
    replicated: bool = False  # the job has landed a run before
    dry_run: str | None = None  # the dry run's outcome, when one ran
    failover: str = ""  # a push job as its backup host's config describes it (rebal failover there)
    notes: list[str] = field(default_factory=list)


def _host_spec(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def make_key(path: str, job: str) -> bool:
    """The job's key pair at ``path``, made (ed25519, no passphrase, private) where it is missing."""
    if os.path.exists(path):
        return False
    if not os.path.isdir(os.path.dirname(path) or "."):
        raise UsageError(f"identity_file {path}: its directory does not exist")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rebal-{job}@{socket.gethostname()}", "-f", path],
        readonly=False)
    return True


def scan(host: str, port: int) -> list[str]:
    """The host's public keys as ssh-keyscan reads them (known_hosts lines)."""
    res = run(["ssh-keyscan", "-T", "10", "-p", str(port), host], check=False, timeout=60)
    lines = [ln for ln in res.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    if not lines:
        raise RebalError(f"{host}:{port}: no host key could be read (is sshd running there?)", exit_code=6)
    return lines


def fingerprints(lines: list[str]) -> list[str]:
    """`SHA256:... (ED25519)` of each known_hosts line."""
    with tempfile.NamedTemporaryFile("w", suffix=".keys") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        out = run(["ssh-keygen", "-l", "-f", f.name]).stdout
    return [f"{p[1]} ({p[-1].strip('()')})" for p in (ln.split() for ln in out.splitlines()) if len(p) >= 3]


def is_pinned(known_hosts: str, host: str, port: int) -> bool:
    if not os.path.exists(known_hosts):
        return False
    res = run(["ssh-keygen", "-F", _host_spec(host, port), "-f", known_hosts], check=False)
    return res.returncode == 0 and bool(res.stdout.strip())


def gate_line(j: Replicate, public: str, rebal_path: str, gate_root: str | None = None) -> tuple[str, str]:
    """(the authorized_keys line, whose file it goes in). Every line is gated (`command=` and
    `restrict`), never a bare key: a push job's key may receive into its own target on the backup
    host (not the target's parent: that would open every other server's backups there), a pull job's
    may send its source on the file server, an rsync job's may run an rsync server into the dataset
    its target directory is on (``gate_root``, which only the backup host knows: UsageError without it)."""
    if j.direction == "pull":
        cmd = f"{rebal_path} gate --send-from {j.source}"
        where = f"{j.source_user}@{j.source_host} (the file server this backup host pulls from)"
    elif j.mode == "zfs":
        cmd = f"{rebal_path} gate --receive-into {j.target}"
        where = f"{j.target_user}@{j.target_host} (the backup host)"
    else:
        if not gate_root:
            raise UsageError(f"job {j.name}: an rsync job's key is gated to the dataset its target {j.target} is on: "
                             f"give --gate-root DATASET (on the backup host: zfs list -H -o name {shlex.quote(j.target)})")
        problem = names.dataset_problem(gate_root)
        if problem:
            raise UsageError(f"--gate-root {gate_root!r}: {problem}")
        cmd = f"{rebal_path} gate --receive-into {gate_root}"
        where = f"{j.target_user}@{j.target_host} (the backup host)"
    if '"' in cmd or "\\" in cmd:
        raise UsageError(f"--rebal-path {rebal_path!r}: no quotes or backslashes in an authorized_keys command")
    return f'command="{cmd}",restrict {public}', where


def allow_hint(j: Replicate, line: str) -> str | None:
    """For a gated key that logs in as another user than root: how to get the `zfs allow` line that
    user needs there (the gate on that host asks its own zfs which permissions exist)."""
    user = j.source_user if j.direction == "pull" else j.target_user
    if not line.startswith("command="):
        return None
    gated = line.split('"', 2)[1]  # the gate's command line, as authorized_keys holds it
    if user == "root":
        return (f"the key logs in as root there: the gate confines it, and a user of its own confines it twice "
                f"(its zfs allow, receive:append from OpenZFS 2.3.2): make one there, set "
                f"{'source_user' if j.direction == 'pull' else 'target_user'} to it, and run `{gated} "
                "--allow-for USER` there as root for its zfs allow line")
    return (f"{user} is not root there: `{gated} --allow-for {user}`, run there as root, prints the zfs allow "
            "line it needs, the least that host's OpenZFS can express (receive:append from 2.3.2)")


def install(j: Replicate, line: str, *, login_identity: str | None, authorized_keys: str) -> bool:
    """Append ``line`` to the other host's authorized_keys over the admin's own ssh login (their
    key or password, checked against the job's pinned known_hosts). False when it was there already."""
    host, port, user = ((j.source_host, j.source_port, j.source_user) if j.direction == "pull"
                        else (j.target_host, j.target_port, j.target_user))
    if host is None:
        raise RebalError(f"job {j.name} has no other host to add a key to (a local target)", exit_code=2)
    argv = ["ssh", "-p", str(port), "-l", user, "-o", "StrictHostKeyChecking=yes"]
    if j.known_hosts:
        argv += ["-o", f"UserKnownHostsFile={j.known_hosts}"]
    if login_identity:
        argv += ["-i", login_identity, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    path = shlex.quote(authorized_keys)
    there = run([*argv, "--", host, f"grep -qxF -- {shlex.quote(line)} {path}"], check=False, timeout=120)
    if there.returncode == 0:
        return False
    if there.returncode == 255:
        raise RebalError(f"{host}: could not log in to add the key: {_last(there.stderr)}", exit_code=6)
    # the line travels on stdin, never through a shell's quoting
    res = run([*argv, "--", host, f"umask 077 && mkdir -p \"$(dirname {path})\" && cat >> {path}"],
              readonly=False, check=False, timeout=120, input=line + "\n")
    if res.returncode != 0:
        raise RebalError(f"could not add the line to {host}:{authorized_keys}: {_last(res.stderr) or f'exit {res.returncode}'}",
                         exit_code=6 if res.returncode == 255 else 1)
    return True


def _last(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def failover_block(j: Replicate) -> str:
    """A push zfs job as the backup host describes it to run `rebal failover` and `rebal failback`
    there: a pull job from this file server (its name as this host knows itself)."""
    import socket

    if j.mode != "zfs" or j.direction != "push" or j.target_host is None:
        return ""
    return "\n".join(["[[replicate]]", f'name = "{j.name}"', 'direction = "pull"',
                      f'source_host = "{socket.getfqdn()}"', f'source = "{j.source}"', f'target = "{j.target}"',
                      f"recursive = {'true' if j.recursive else 'false'}", f"raw = {'true' if j.raw else 'false'}",
                      'identity_file = "/etc/rebal/id_ed25519"  # a key root on this host takes (failback rolls back)',
                      'known_hosts = "/etc/rebal/known_hosts"'])


def pair(j: Replicate, *, pin: str | None, do_install: bool, login_identity: str | None, authorized_keys: str,
         rebal_path: str, gate_root: str | None = None) -> Pairing:
    """Each step that can be done for job ``j`` now, and what is left for the admin."""
    host = j.remote_host
    out = Pairing(j.name, host)
    if host is None:
        out.notes.append("a local target: no ssh, nothing to pair")
        return out
    if not j.identity_file or not j.known_hosts:
        missing = [k for k in ("identity_file", "known_hosts") if not getattr(j, k)]
        raise UsageError(f"job {j.name}: set {' and '.join(missing)} in its [[replicate]] block first "
                         "(e.g. identity_file = \"/etc/rebal/id_ed25519\", known_hosts = \"/etc/rebal/known_hosts\")")
    port = j.source_port if j.direction == "pull" else j.target_port
    out.key = j.identity_file
    out.key_made = make_key(j.identity_file, j.name)
    try:
        with open(j.identity_file + ".pub") as f:
            out.public = f.read().strip()
    except OSError as e:
        raise UsageError(f"identity_file {j.identity_file}: its public half {j.identity_file}.pub cannot be read "
                         f"({e.strerror}): ssh-keygen -y -f {j.identity_file} > {j.identity_file}.pub makes it") from None
    out.pinned = is_pinned(j.known_hosts, host, port)
    if not out.pinned:
        lines = scan(host, port)
        out.fingerprints = fingerprints(lines)
        if pin:
            want = pin.strip()
            keep = [ln for ln, fp in zip(lines, out.fingerprints) if fp.split()[0] == want]
            if not keep:
                raise RebalError(f"{host}: no key of it has the fingerprint {want} (it offers: "
                                 f"{', '.join(out.fingerprints)}): not pinned. Check the fingerprint on the host itself",
                                 exit_code=6)
            try:
                with open(j.known_hosts, "a") as f:
                    os.chmod(j.known_hosts, 0o600)
                    f.write("\n".join(keep) + "\n")
            except OSError as e:
                from ..errors import CannotWrite

                raise CannotWrite.of("the known_hosts file", j.known_hosts, e) from None
            out.pinned = out.pinned_now = True
    out.line, out.where = gate_line(j, out.public, rebal_path, gate_root)
    out.failover = failover_block(j)
    hint = allow_hint(j, out.line)
    if hint:
        out.notes.append(hint)
    if do_install:
        if not out.pinned:
            raise RebalError(f"{host}: its host key is not pinned yet: give --pin with the fingerprint you checked",
                             exit_code=6)
        out.installed = install(j, out.line, login_identity=login_identity, authorized_keys=authorized_keys)
        user = j.source_user if j.direction == "pull" else j.target_user
        out.installed_to = f"{user}@{host}:{authorized_keys}"
    return out
