"""`rebal restore JOB --all`: a recursive job's whole tree back from a real backup host (sshd on
loopback, a second zfs-fuse pool), and the job going on incrementally from it."""

import pytest
from restorescenarios import restore_tree_scenario

pytestmark = pytest.mark.zfs


def test_a_whole_tree_comes_back_and_the_chain_goes_on(make_pool, backup_host, tmp_path):
    src = make_pool([[], []], size="256M")
    dst = make_pool([[]], size="512M")
    spare = make_pool([[]], size="256M")
    restore_tree_scenario(src, dst, backup_host, tmp_path, spare=spare)

