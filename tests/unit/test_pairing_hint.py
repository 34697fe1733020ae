"""`rebal keys`: every authorized_keys line it writes is gated to the job's own target (issues 49, 63)."""

import pytest

from rebal.config import Replicate
from rebal.errors import UsageError
from rebal.replicate.pairing import allow_hint, gate_line


def job(**kw) -> Replicate:
    base = dict(name="nightly", source="tank/data", target="backup/tank-data", target_host="bk.lan")
    return Replicate(**(base | kw))


def test_a_non_root_push_key_is_told_how_to_get_its_allow_line():
    j = job(target_user="rebal")
    line, _ = gate_line(j, "ssh-ed25519 AAAA k", "/usr/bin/rebal")
    hint = allow_hint(j, line)
    assert hint and "`/usr/bin/rebal gate --receive-into backup/tank-data --allow-for rebal`" in hint


def test_a_root_key_is_offered_a_user_of_its_own():
    j = job(target_user="root")
    hint = allow_hint(j, gate_line(j, "ssh-ed25519 AAAA k", "/usr/bin/rebal")[0])
    assert hint and "logs in as root" in hint and "--allow-for USER" in hint


def test_the_gate_is_the_jobs_own_target_not_its_parent():
    """Attacker: gated on the target's parent (`backup`), the key could receive into, and read, every
    other server's backups in that pool."""
    line, _ = gate_line(job(), "ssh-ed25519 AAAA k", "/usr/bin/rebal")
    assert line == 'command="/usr/bin/rebal gate --receive-into backup/tank-data",restrict ssh-ed25519 AAAA k'


def test_an_rsync_key_is_never_written_bare():
    """Attacker: an rsync job's key was installed with no command= and no restrict: a root shell on
    the backup host for whoever holds the file server."""
    r = job(mode="rsync", target="/srv/backup/fs")
    with pytest.raises(UsageError, match="--gate-root"):
        gate_line(r, "ssh-ed25519 AAAA k", "/usr/bin/rebal")
    line, _ = gate_line(r, "ssh-ed25519 AAAA k", "/usr/bin/rebal", "backup/fs")
    assert line == 'command="/usr/bin/rebal gate --receive-into backup/fs",restrict ssh-ed25519 AAAA k'
    with pytest.raises(UsageError):
        gate_line(r, "ssh-ed25519 AAAA k", "/usr/bin/rebal", "backup/fs; rm")
    with pytest.raises(UsageError):
        gate_line(job(), "ssh-ed25519 AAAA k", '/usr/bin/rebal",no-restrict')
