"""A pull job runs on the backup host: its source is the other end, its backup this one. Verify,
restore of a path and the backup's scrub each work on the right host (issue 46: push and pull once
swapped "local" and "remote"). Both hosts of a loopback test are this machine, so the file server's
key logs every command it is sent: the source is read through it, the backup never is."""

import json
import os

import pytest
from conftest import rebal, rebal_json
from replscenarios import fill, mountpoint
from sshenv import logged_key
from zfsenv import sh

pytestmark = [pytest.mark.zfs]


@pytest.fixture
def file_server(own_sshd):
    return own_sshd


def test_verify_restore_and_scrub_of_a_pull_job_use_the_right_hosts(make_pool, file_server, tmp_path):
    src = make_pool([[]], size="256M")
    dst = make_pool([[]], size="256M")
    sh("zfs", "create", f"{src.name}/data")
    for kid in ("child", "child/grandchild", "sibling"):
        sh("zfs", "create", f"{src.name}/data/{kid}")
    fill(src, 1)
    log = tmp_path / "sent.log"
    logged_key(file_server, log)
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'state_db = "{tmp_path / "state.db"}"\n[[replicate]]\nname = "pulled"\ndirection = "pull"\n'
        f'source_host = "{file_server.host}"\nsource_port = {file_server.port}\n'
        f'identity_file = "{file_server.identity}"\nknown_hosts = "{file_server.known_hosts}"\n'
        f'source = "{src.name}/data"\ntarget = "{dst.name}/pulled"\nrecursive = true\n'
        "[replicate.retention_source]\nlast = 1\n")
    r1 = rebal_json("replicate", "pulled", config=cfg)
    assert r1["outcome"] == "ok" and len(r1["datasets"]) == 4, r1
    backup = f"{dst.name}/pulled"

    def sent() -> list[str]:
        # (bytes: verify's sample may name a file whose name is not UTF-8)
        lines = log.read_bytes().decode(errors="surrogateescape").splitlines() if log.exists() else []
        log.write_text("")
        return lines

    sent()
    r = rebal("verify", "pulled", "--sample", "all", "--json", config=cfg, check=False)  # every file hashed
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["level"] == "OK", doc
    assert doc["files"][0] == doc["files"][1] > 60, doc  # contents compared, of all four datasets
    lines = sent()
    assert any(f"{src.name}/data" in ln for ln in lines), lines  # the source was read on the file server
    assert not any(backup in ln for ln in lines), lines  # the backup was read here, never through the key

    out = tmp_path / "restored"
    top = os.path.join(mountpoint(f"{src.name}/data"), "top", "1")
    import stat

    name = min(e.name for e in os.scandir(top) if stat.S_ISREG(e.stat(follow_symlinks=False).st_mode))
    rebal("restore", "pulled", "--path", f"top/1/{name}", "--to", str(out), config=cfg)
    assert (out / name).read_bytes() == open(os.path.join(top, name), "rb").read()
    rebal("restore", "pulled", "--path", "child/f1", "--to", str(out / "kid"), config=cfg)  # in a child dataset
    assert (out / "kid" / "f1").read_bytes() == open(os.path.join(mountpoint(f"{src.name}/data"), "child", "f1"),
                                                      "rb").read()
    assert sent() == [], "a restore from the backup here went through the file server's key"

    sc = rebal_json("scrub", "--job", "pulled", config=cfg)
    assert sc["pool"] == dst.name and sc["host"] == "this host", sc
    assert sent() == []
