"""Rebalance and replication on one server (issue 12), on real zfs-fuse pools and a real sshd:
the plan tells what the job's snapshot pins and what the next incremental grows by; the refusal gives
the ways out; a rebalance within a growth budget; the next replication frees the old base; and a
rebalance and a replication of the same data take turns, the rebalance chained after the job."""

import json
import subprocess
import sys
import time

import pytest
from conftest import rebal, rebal_json
from fsenv import manifest
from treegen import mixed_tree
from zfsenv import sh

pytestmark = pytest.mark.zfs


def setup(make_pool, backup_host, tmp_path, **rebalance):
    src = make_pool([[], []], size="192M")
    sh("zfs", "create", f"{src.name}/data")
    data = src.mountpoint / "data"
    mixed_tree(data, small=200, large=8, large_mib=(8, 10), seed=3, xattrs=False)
    src.add(str(src.disk("192M")), str(src.disk("192M")))
    dst = make_pool([[]], size="512M")
    cfg = tmp_path / "config.toml"
    rb = "\n".join(f"{k} = {json.dumps(v)}" for k, v in ({"targets": [f"{src.name}/data"]} | rebalance).items())
    cfg.write_text(f'state_db = "{tmp_path / "state.db"}"\n[rebalance]\n{rb}\n'
                   '[schedule]\nrebalance_after = "nightly"\n'
                   + backup_host.config_block(name="nightly", source=f"{src.name}/data", target=f"{dst.name}/copy"))
    return src, dst, data, cfg


def prop(ds: str, name: str) -> int:
    """A space property once the pool's open transaction group is written (a property change waits
    for it: zfs-fuse has no `zpool sync`)."""
    pool = ds.split("/")[0]
    for _ in range(2):
        sh("zfs", "set", "rebal:settle=1", pool)
        sh("zfs", "inherit", "rebal:settle", pool)
    return int(sh("zfs", "get", "-Hp", "-o", "value", name, ds).stdout.strip())


def test_plan_budget_and_the_next_replication_frees_the_base(make_pool, backup_host, tmp_path):
    src, dst, data, cfg = setup(make_pool, backup_host, tmp_path)
    r1 = rebal_json("replicate", "nightly", config=cfg)
    assert r1["outcome"] == "ok" and r1["datasets"][0]["cursor"] == "hold", r1  # zfs-fuse: no bookmarks
    base = f"{src.name}/data@{r1['snapshot']}"

    plan = rebal_json("plan", f"{src.name}/data", "--target-spread", "12", config=cfg)
    [snap] = plan["snapshots"]
    assert snap["name"] == base and snap["owner"] == "rebal:nightly", snap
    assert snap["pinned_bytes"] == plan["pinned_bytes"] > 0, snap  # everything predates it
    assert snap["expires_when"] == "at the next run of job nightly"
    [job] = plan["replication"]
    assert job["job"] == "nightly" and job["next_incremental_bytes"] == plan["bytes_planned"] > 0, json.dumps({k: v for k, v in plan.items() if k not in ("dirs", "vdevs", "targets", "skipped")})
    growth = plan["growth"]
    assert 0 < growth["bytes"] <= plan["bytes_planned"] and growth["fits_reserve"], growth
    text = rebal("plan", f"{src.name}/data", "--target-spread", "12", config=cfg).stdout
    assert "snapshots holding data to rewrite" in text and "rebal:nightly" in text and "next incremental" in text

    r = rebal("rebalance", f"{src.name}/data", "--target-spread", "12", config=cfg, check=False)
    assert r.returncode == 2 and "Ways out" in r.stderr, r.stderr
    for way in ("bookmark", "--allow-snapshots --max-growth", "zfs rewrite -P"):
        assert way in r.stderr, (way, r.stderr)

    before = manifest(data)
    budget = int(growth["bytes"] * 1.3)
    r = rebal("rebalance", f"{src.name}/data", "--target-spread", "12", "--allow-snapshots",
              "--max-growth", str(budget), "--json", config=cfg)
    done = json.loads(r.stdout.splitlines()[-1])
    assert done["outcome"] == "ok" and done["spread_when_freed"] <= 12 < done["spread_before"], done
    assert "once the snapshots holding the old copies go" in done["reason"], done
    assert 0 < done["growth"] <= budget and done["waiting_on"] == [base], done
    assert manifest(data) == before
    status = rebal_json("status", src.name, config=cfg)
    assert any(f"waiting for 1 snapshot(s) to go ({base})" in w["message"] for w in status["rebalance"]), status
    health = rebal("health", "--json", config=cfg, check=False)
    assert any("waiting for 1 snapshot" in f["message"] for f in json.loads(health.stdout)["findings"])
    held = prop(f"{src.name}/data", "usedbysnapshots")
    assert held >= 0.5 * done["growth"], (held, done["growth"])  # the old copies: held by the base snapshot

    # a budget too small for one batch stops at once, with the reason
    small = rebal("rebalance", f"{src.name}/data", "--target-spread", "1", "--allow-snapshots",
                  "--max-growth", "1K", "--json", config=cfg)
    last = json.loads(small.stdout.splitlines()[-1])
    assert last["outcome"] in ("stopped", "failed") and "--max-growth" in last["reason"], last

    r2 = rebal_json("replicate", "nightly", config=cfg)
    assert r2["outcome"] == "ok" and r1["snapshot"] in r2["pruned_source"], r2
    d = r2["datasets"][0]
    assert d["bytes"] >= 0.7 * done["growth"], (d["bytes"], done)  # the copies went into the incremental
    assert prop(f"{src.name}/data", "usedbysnapshots") < held / 4, "the old base went: its space is free"
    status = rebal_json("status", src.name, config=cfg)
    assert status["pools"][0]["spread"] <= 12 + 2, (status, done)  # re-measured: the balance shows now
    assert status["rebalance"] == [], "the snapshot went: nothing waits"


def run_state(cfg, kind):
    runs = rebal_json("runs", "--kind", kind, "--limit", "1", config=cfg)["runs"]
    return runs[0] if runs else None


def test_rebalance_and_replication_take_turns_and_chain(make_pool, backup_host, tmp_path):
    src, dst, data, cfg = setup(make_pool, backup_host, tmp_path, allow_snapshots=True, max_rate="6M",
                                target_spread=5)
    assert rebal_json("replicate", "nightly", config=cfg)["outcome"] == "ok"
    reb = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "run", "rebalance"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (run_state(cfg, "rebalance") or {}).get("outcome") != "running":
        assert time.monotonic() < deadline and reb.poll() is None, ("the scheduled rebalance did not start", reb.poll() is not None and reb.communicate())
        time.sleep(0.2)  # polling the recorded state of another process, bounded
    rep = subprocess.run([sys.executable, "-m", "rebal", "--config", str(cfg), "replicate", "nightly", "--json"],
                         capture_output=True, text=True, timeout=300)
    reb.communicate(timeout=300)
    assert rep.returncode == 0, rep.stderr
    assert "replication job nightly waits for the rebalance of pool" in rep.stderr, rep.stderr
    rb_run, rp_run = run_state(cfg, "rebalance"), run_state(cfg, "replicate")
    assert rb_run["ended"] <= rp_run["started"], (rb_run, rp_run)  # it waited: no overlap

    # chained: `rebal run nightly` replicates, then the rebalance runs right after it landed
    out = subprocess.run([sys.executable, "-m", "rebal", "--config", str(cfg), "run", "nightly"],
                         capture_output=True, text=True, timeout=600)
    assert "the chained rebalance runs now" in out.stderr, out.stderr
    runs = rebal_json("runs", "--limit", "2", config=cfg)["runs"]
    assert [r["kind"] for r in runs] == ["rebalance", "replicate"], runs
    assert runs[1]["outcome"] == "ok" and runs[1]["ended"] <= runs[0]["started"], runs


HOLDER = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from rebal.locks import Together
with Together(sys.argv[2], ["nightly"], "verify of job nightly"):
    subprocess.run(["zfs", "snapshot", sys.argv[3]], check=True)
    print("snapshot taken", flush=True)
    sys.stdin.readline()
    subprocess.run(["zfs", "destroy", sys.argv[3]], check=True)
"""


def test_a_scheduled_rebalance_waits_for_a_run_that_drops_its_snapshot(make_pool, backup_host, tmp_path):
    """A verify keeps a job's snapshot only for its compare, holding the job's key meanwhile: a scheduled
    rebalance that starts then waits for it and rewrites once the snapshot is gone, rather than be
    refused (and recorded failed) for data that snapshot pinned for a minute."""
    import os

    src, dst, data, cfg = setup(make_pool, backup_host, tmp_path, target_spread=5)
    os.sync()  # (zfs-fuse: the files in the snapshot, not in FUSE's write-back cache)
    before = manifest(data)
    snap = f"{src.name}/data@rebal-nightly-20261126T000000Z"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, os.getcwd(), str(tmp_path / "state.db"), snap],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "snapshot taken"
    plan = rebal_json("plan", f"{src.name}/data", config=cfg)
    assert plan["pinned_bytes"] > 0 and plan["snapshots"][0]["owner"] == "rebal:nightly", plan["snapshots"]
    reb = subprocess.Popen([sys.executable, "-m", "rebal", "--config", str(cfg), "run", "rebalance"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []
    for line in reb.stderr:  # until it says it waits (or ends without having waited: the assert below)
        said.append(line)
        if "waits for the verify of job nightly" in line:
            break
    assert "waits for the verify of job nightly" in "".join(said), ("".join(said), reb.poll())
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=60) == 0
    out, err = reb.communicate(timeout=600)
    assert reb.returncode == 0, "".join(said) + err
    runs = rebal_json("runs", "--kind", "rebalance", config=cfg)["runs"]
    assert [r["outcome"] for r in runs] == ["ok"], runs  # one run, not a refusal recorded first
    assert manifest(data) == before
