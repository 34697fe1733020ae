"""`rebal where --read` on a grown pool, shared by zfs-fuse and the lane: before a rebalance the old
data's reads fall on the old vdevs; after it, on every vdev."""

import json
import os

from conftest import rebal, rebal_json
from zfsenv import sh, write_cfg


def read_spread_scenario(make_pool, tmp_path, size: str, files: int, mib: int, rebalance_args: list[str]) -> dict:
    pool = make_pool([[], []], size=size)
    sh("zfs", "create", "-o", "compression=off", f"{pool.name}/data")
    data = pool.mountpoint / "data"
    for i in range(files):
        with open(data / f"f{i}.bin", "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(1 << 20))
    os.sync()
    pool.add(str(pool.disk(size)), str(pool.disk(size)))
    cfg = write_cfg(tmp_path)
    pool.cycle()
    budget = f"{files * mib}M"
    before = rebal_json("where", str(data), "--read", "--read-bytes", budget, config=cfg)
    assert before["from_disk"] >= 0.8, before  # cold: the pool was exported and imported
    old = sum(v["share_bytes"] for v in before["vdevs"][:2])
    assert len(before["vdevs"]) == 4 and old >= 0.95, before
    text = rebal("where", str(data), "--read", "--read-bytes", "1M", config=cfg).stdout
    assert "VDEV" in text and "SHARE" in text and "/s)" in text
    pool.cycle()
    r = rebal("rebalance", f"{pool.name}/data", *rebalance_args, "--measure-read", "--read-bytes", budget, "--json",
              config=cfg)
    done = json.loads(r.stdout.splitlines()[-1])
    recorded = done["read"]["before"]
    assert sum(v["share_bytes"] for v in recorded["vdevs"][:2]) >= 0.95 and recorded["from_disk"] >= 0.8, recorded
    assert done["read"]["after"]["bytes_read"] > 0
    runs = rebal("runs", "--kind", "rebalance", config=cfg).stdout
    assert f"run {done['run_id']}: reads before:" in runs and "reads after:" in runs, runs
    pool.cycle()
    after = rebal_json("where", str(data), "--read", "--read-bytes", budget, config=cfg)
    new = sum(v["share_bytes"] for v in after["vdevs"][2:])
    assert after["from_disk"] >= 0.8 and new >= 0.3, after
    return {"before": before, "after": after}
