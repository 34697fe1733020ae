"""rebal-gate-verify (rebal/gate/verify.py, issue 69) as an attacker would use it: only a
snapshot under the gate's root, and only files the snapshot's own walk found are hashed, never a
path the caller makes up, never through a link; contents never leave, only sizes and hashes."""

import hashlib
import os

import pytest

from rebal.gate.check import Policy, Refused, split
from rebal.gate.verify import answer, check_verify, parse_answer

RECV = Policy("receive", "bk/copy")


@pytest.mark.parametrize("line", [
    "rebal-gate-verify bk/copy/data",                   # not a snapshot
    "rebal-gate-verify bk/other@s",                     # outside the root
    "rebal-gate-verify bk/copy@s bk/copy@t",            # two
    "rebal-gate-verify bk/copy/../x@s",
    "rebal-gate-verify bk/copy@s | sh",
])
def test_refused(line):
    with pytest.raises(Refused):
        check_verify(RECV, split(line))


def test_allowed():
    assert check_verify(RECV, split("rebal-gate-verify bk/copy/data@rebal-j-20261101T000000Z")) == \
        "bk/copy/data@rebal-j-20261101T000000Z"


def test_only_what_the_walk_found_is_hashed(tmp_path):
    root = tmp_path / "snap"
    (root / "d").mkdir(parents=True)
    (root / "d" / "a").write_bytes(b"alpha")
    secret = tmp_path / "secret"
    secret.write_bytes(b"not yours")
    os.symlink(secret, root / "link")          # a link in the snapshot to a file of the host
    os.symlink(tmp_path, root / "up")          # and to a directory above it
    asked = [b"d/a", b"link", b"../secret", b"up/secret", str(secret).encode(), b"nothing"]
    inv, hashes = parse_answer(answer(os.fsencode(root), asked).decode())
    assert inv == {"d/a": 5}
    assert hashes == {"d/a": hashlib.sha256(b"alpha").hexdigest(), "link": None, "../secret": None,
                      "up/secret": None, str(secret): None, "nothing": None}
    assert b"not yours" not in answer(os.fsencode(root), asked) and b"alpha" not in answer(os.fsencode(root), asked)
