"""`rebal rebuild` on zfs-fuse: a pool checked against its backup, recorded, destroyed and made again
(by the test, as the admin would), restored with its datasets' properties, and its job going on
incrementally. zfs-fuse has no written@ property: the admin's --writers-stopped is required and said."""

import pytest
from replscenarios import make_tree
from restorescenarios import lose_and_recreate, rebuild_scenario

pytestmark = pytest.mark.zfs


def test_a_pool_rebuilt_from_its_backup(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[], []], size="256M"), make_pool([[]], size="512M")
    make_tree(src)
    rec, done, nxt = rebuild_scenario(src, dst, backup_host, tmp_path, recreate=lose_and_recreate,
                                      props={"data/child": ("atime", "off"), "data/sibling": ("compression", "gzip")},
                                      writers_flag=("--writers-stopped",))
    assert any("--writers-stopped" in n for n in rec["notes"]), rec["notes"]
