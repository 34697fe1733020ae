"""Issue 46: each run counts its own commands. The daemon runs jobs in threads at once; a process-wide
counter (as before) made two runs at once count each other's commands. Four jobs of the same shape:
two run one after the other, two at once in threads as the daemon runs them; each pair counts alike."""

import threading

import pytest
from replscenarios import mountpoint
from zfsenv import sh

from rebal.config import load
from rebal.replicate.job import run_job

pytestmark = pytest.mark.zfs


def test_two_jobs_at_once_each_count_their_own_commands(make_pool, backup_host, tmp_path):
    src, dst = make_pool([[]], size="256M"), make_pool([[]], size="256M")
    names = ("warm", "a", "b", "c", "d")
    for n in names:
        sh("zfs", "create", f"{src.name}/{n}")
        for i in range(3):
            sh("zfs", "create", f"{src.name}/{n}/k{i}")
            with open(f"{mountpoint(f'{src.name}/{n}/k{i}')}/f", "wb") as f:
                f.write(b"x" * 100_000)
    cfg_path = tmp_path / "config.toml"
    cfg_path.write_text(f'state_db = "{tmp_path / "state.db"}"\n' + "".join(
        backup_host.config_block(name=n, source=f"{src.name}/{n}", target=f"{dst.name}/{n}", recursive=True)
        for n in names))
    cfg = load(str(cfg_path))
    counts = {}
    for n in ("warm", "a", "b"):  # the backup's abilities kept by the first run; then one at a time
        outcome, d = run_job(cfg, n)
        assert outcome == "ok", d
        counts[n] = (d["local_commands"], d["remote_commands"])
    start = threading.Barrier(2)

    def one(n):
        start.wait()
        outcome, d = run_job(cfg, n)
        assert outcome == "ok", d
        counts[n] = (d["local_commands"], d["remote_commands"])

    threads = [threading.Thread(target=one, args=(n,)) for n in ("c", "d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts["a"][0] > 5, counts  # something was counted
    assert counts["c"] == counts["a"] and counts["d"] == counts["b"], counts
