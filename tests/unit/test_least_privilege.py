"""The least a gated key needs (issue 49): `zfs allow`'s text read for one user, and the allow set a
gate prints for this host's zfs (receive:append from OpenZFS 2.3.2, send:encrypted from 2.4.0)."""

import pytest

from rebal.errors import RebalError
from rebal.gate.check import allow_set
from rebal.zfs.host import delegations

# `zfs allow pool/b/push` on OpenZFS 2.4.4 (the lane's guest), with grants on the parents as well
ALLOW = """---- Permissions on pool/b/push ----------------------------------
Local+Descendent permissions:
\tuser rebalu create,mount,readonly,receive:append
---- Permissions on pool/b ---------------------------------------
Local permissions:
\tuser rebalu destroy
Descendent permissions:
\tgroup backup rollback
Local+Descendent permissions:
\teveryone userprop
---- Permissions on pool -----------------------------------------
Permission sets:
\t@s receive
Create time permissions:
\tdestroy
"""


def test_what_applies_to_one_user():
    assert delegations(ALLOW, "rebalu") == {"create", "mount", "readonly", "receive:append", "userprop"}
    # a parent's local grant does not reach the child; its descendent grant does, through a group
    assert "rollback" in delegations(ALLOW, "rebalu", ("backup",))
    assert delegations(ALLOW, "someone") == {"userprop"}
    assert delegations("", "rebalu") == set()


def test_receive_append_where_this_zfs_has_it():
    argv, notes = allow_set("receive", "backup/push", "rebalu", (2, 4, 4))
    assert argv == ["zfs", "allow", "-u", "rebalu", "receive:append,create,mount,readonly", "backup/push"]
    assert notes == []
    argv, notes = allow_set("receive", "backup/push", "rebalu", (2, 3, 1))
    assert argv[4].startswith("receive,") and "no receive:append" in notes[0] and "2.3.1" in notes[0]
    argv, notes = allow_set("receive", "backup/push", "rebalu", (2, 4, 4), rollback=True)
    assert argv[4].startswith("receive,") and "roll the backup back" in notes[0]


def test_send_encrypted_for_raw_jobs():
    assert allow_set("send", "tank/data", "rebalu", (2, 4, 0), raw=True)[0][4].startswith("send:encrypted,")
    argv, notes = allow_set("send", "tank/data", "rebalu", (2, 3, 9), raw=True)
    assert argv[4].startswith("send,") and "send:encrypted" in notes[0]
    assert allow_set("send", "tank/data", "rebalu", (2, 4, 4))[0][4].startswith("send,")


@pytest.mark.parametrize("user,root", [("bad;user", "tank/data"), ("rebalu", "tank/../etc"), ("-o", "tank")])
def test_bad_names_are_refused(user, root):
    with pytest.raises(RebalError):
        allow_set("receive", root, user, (2, 4, 4))
