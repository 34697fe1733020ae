"""`rebal config check` says what this host's real zfs has of what rebal uses (zfs-fuse in CI,
OpenZFS 2.4.4 in the lane) and what rebal does without the rest."""

import json

import pytest
from conftest import rebal

pytestmark = [pytest.mark.zfs, pytest.mark.lane]


def test_config_check_names_this_hosts_zfs_and_what_it_lacks(zfs_ready, cfg_file):
    out = json.loads(rebal("config", "check", "--json", config=cfg_file).stdout)["zfs"]
    missing = {m["feature"] for m in out["missing"]}
    text = rebal("config", "check", config=cfg_file).stdout
    if out["version"] is None:  # zfs-fuse: no `zfs version`, no receive -c, no rewrite
        assert "zfs without `zfs version`" in text
        assert {"corrective receive (zfs receive -c)", "zfs rewrite"} <= missing, missing
    else:
        major, minor = (int(x) for x in out["version"].split(".")[:2])
        assert f"OpenZFS {out['version']}" in text
        if (major, minor) >= (2, 4):
            assert missing == set() and "every feature rebal uses" in text, (missing, text)
