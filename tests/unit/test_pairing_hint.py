"""`rebal keys` points a non-root gated key at the gate's --allow-for (issue 49)."""

from rebal.config import Replicate
from rebal.replicate.pairing import allow_hint, gate_line


def job(**kw) -> Replicate:
    base = dict(name="nightly", source="tank/data", target="backup/tank-data", target_host="bk.lan")
    return Replicate(**(base | kw))


def test_a_non_root_push_key_is_told_how_to_get_its_allow_line():
    j = job(target_user="rebal")
    line, _ = gate_line(j, "ssh-ed25519 AAAA k", "/usr/bin/rebal")
    hint = allow_hint(j, line)
    assert hint and "`/usr/bin/rebal gate --receive-into backup --allow-for rebal`" in hint


def test_root_and_ungated_keys_get_no_hint():
    j = job(target_user="root")
    assert allow_hint(j, gate_line(j, "ssh-ed25519 AAAA k", "/usr/bin/rebal")[0]) is None
    r = job(target_user="rebal", mode="rsync", target="/srv/backup")
    assert allow_hint(r, gate_line(r, "ssh-ed25519 AAAA k", "/usr/bin/rebal")[0]) is None
