"""The tests' own sshd (tests/sshenv.py) lets a test in after other clients hung up on it before
logging in: OpenSSH 9.8 and later (the lane guest's 10.0) shut such an address out by default
(PerSourcePenalties), and CI's lane lost two tests so ("Connection closed by 127.0.0.1")."""

from __future__ import annotations

import socket

import pytest

from sshenv import ssh_as_job

pytestmark = [pytest.mark.zfs, pytest.mark.lane]  # the own_sshd fixture: sshd on 127.0.0.1


def test_clients_that_hung_up_before_logging_in_do_not_shut_the_next_test_out(own_sshd):
    """Before the fix, in the lane: from the 16th connection sshd greets "Not allowed at this time"
    and the login ends as CI's did: "Connection closed by 127.0.0.1 port N"."""
    greeted = set()
    for _ in range(30):  # 1 s of penalty each where penalties are on: twice the 15 s that shuts out
        with socket.create_connection((own_sshd.host, own_sshd.port), timeout=30) as s:
            greeted.add(s.recv(24)[:4])
    r = ssh_as_job(own_sshd, "echo in")
    assert (r.returncode, r.stdout, greeted) == (0, b"in\n", {b"SSH-"}), r.stderr
