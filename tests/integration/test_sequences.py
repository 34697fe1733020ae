"""Sequences, not single commands (issue 36): random runs of the public commands, with valid and
mistaken arguments, over a grown zfs-fuse pool and a backup pool behind a real sshd. After every
step: the exit code is one the README's table gives, and one that step may give; no traceback and
no internal error (exit 70); `--json` output parses; the data tree equals its manifest and, once a
replication landed, the backup equals the source.

    REBAL_SEQ_STEPS=400 REBAL_SEQ_SEED=7 bash scripts/test.sh tests/integration/test_sequences.py

The seed is printed (and is in the failure message); every bug a sequence finds becomes a named
regression test of its own."""

import json
import os
import random
import time

import pytest
from conftest import rebal
from fsenv import manifest
from replscenarios import backup_root, cfg_for
from treegen import mixed_tree
from zfsenv import sh

pytestmark = pytest.mark.zfs

README_CODES = {0, 1, 2, 3, 4, 5, 6, 130}  # README: "Exit codes"
STEPS = int(os.environ.get("REBAL_SEQ_STEPS", "60"))
SEED = int(os.environ.get("REBAL_SEQ_SEED", "36"))


def steps(pool: str, target: str, tmp) -> list[tuple[str, list[str], set[int]]]:
    """(name, argv, the exit codes that step may give)."""
    ds = f"{pool}/data"
    return [
        ("status", ["status", "--json"], {0}),
        ("status pool", ["status", pool], {0}),
        ("status no such pool", ["status", "rbtnosuchpool"], {5}),
        ("status bad name", ["status", "bad/name"], {2}),
        ("plan", ["plan", ds, "--json"], {0}),
        ("plan bad placement", ["plan", ds, "--placement", "guess"], {2}),
        ("plan no such dataset", ["plan", f"{pool}/nosuch"], {1, 2, 5}),
        # (2 once a replication's snapshot holds the data, on zfs-fuse where the base is a snapshot)
        ("rebalance a slice", ["rebalance", ds, "--max-bytes", "2M", "--target-spread", "1", "--json"], {0, 2}),
        ("rebalance a slice, growth allowed", ["rebalance", ds, "--max-bytes", "2M", "--target-spread", "1",
                                               "--allow-snapshots", "--max-growth", "8M", "--json"], {0}),
        ("rebalance dry run", ["rebalance", ds, "--dry-run", "--json"], {0}),
        ("rebalance bad rate", ["rebalance", ds, "--max-rate", "fast please"], {2}),
        ("rebalance min over max", ["rebalance", ds, "--min-size", "10M", "--max-size", "1M"], {2}),
        ("rebalance bad until", ["rebalance", ds, "--until", "25:99"], {2}),
        ("replicate", ["replicate", "nightly", "--json"], {0}),
        ("replicate dry run", ["replicate", "nightly", "--dry-run", "--json"], {0}),
        ("replicate no such job", ["replicate", "nosuch"], {2}),
        ("verify", ["verify", "nightly", "--json"], {0, 1, 2}),
        ("verify no such job", ["verify", "nosuch"], {2}),
        ("runs", ["runs"], {0}),
        ("runs json", ["runs", "--json", "--limit", "50"], {0}),
        ("runs of the job", ["runs", "--job", "nightly"], {0}),
        ("runs of verify", ["runs", "--kind", "verify"], {0}),
        ("backups", ["backups", "nightly", "--json"], {0, 1}),
        ("restore one file", ["restore", "nightly", "--path", "top/small00003", "--to",
                              str(tmp / f"restore-{random.random():.6f}")], {0, 1}),
        ("restore onto the source", ["restore", "nightly", "--to", ds], {1, 2}),
        ("health", ["health", "--json"], {0, 1, 2}),
        ("metrics", ["metrics"], {0}),
        ("metrics nowhere", ["metrics", "--output", str(tmp / "no" / "such" / "m.prom")], {1}),
        ("scrub", ["scrub", pool], {0}),
        ("scrub no such pool", ["scrub", "rbtnosuchpool"], {5}),
        ("config check", ["config", "check"], {0}),
        ("config check a bad file", ["config", "check", str(tmp / "bad.toml")], {2}),
        ("prune dry run", ["prune", target, "--job", "nightly", "--dry-run", "--json"], {0, 1, 2}),
        ("units dry run", ["units", "--dir", str(tmp / "units"), "--dry-run", "--json"], {0}),
    ]


def backup_manifest(ds: str) -> dict:
    """The backup's tree. zfs-fuse remounts a dataset after each receive and FUSE may still hold an
    entry of the mount before (seen: a name listed, then not found): read it again on a fresh mount."""
    try:
        return manifest(backup_root(ds))
    except FileNotFoundError:
        sh("zfs", "umount", ds)
        return manifest(backup_root(ds))


def test_random_sequences_of_commands(make_pool, backup_host, tmp_path):
    pool = make_pool([[], []], size="192M")
    dst = make_pool([[]], size="192M")
    sh("zfs", "create", f"{pool.name}/data")
    root = sh("zfs", "get", "-H", "-o", "value", "mountpoint", f"{pool.name}/data").stdout.strip()
    mixed_tree(os.path.join(root, "top"), small=80, large=3, large_mib=(4, 6), seed=3, xattrs=False)
    pool.add(str(pool.disk("192M")))
    before = manifest(root)
    cfg = cfg_for(tmp_path, backup_host, name="nightly", source=f"{pool.name}/data", target=f"{dst.name}/copy")
    cfg.write_text(cfg.read_text().replace("[[replicate]]", f'pools = ["{pool.name}", "{dst.name}"]\n'
                                           f'[rebalance]\ntargets = ["{pool.name}/data"]\n[[replicate]]', 1))
    (tmp_path / "bad.toml").write_text('state_db = 5\n[rebalance]\nmax_rate = "fast please"\n')
    rnd = random.Random(SEED)
    table = steps(pool.name, f"{dst.name}/copy", tmp_path)
    replicated = False
    done = []
    print(f"sequence seed {SEED}, {STEPS} steps")
    for i in range(STEPS):
        name, argv, allowed = rnd.choice(table)
        done.append(name)
        t0 = time.monotonic()
        r = rebal(*argv, config=cfg, check=False)  # (asserts no traceback)
        where = f"seed {SEED}, step {i} ({name}): rebal {' '.join(argv)} -> {r.returncode} in " \
                f"{time.monotonic() - t0:.1f} s\n{r.stderr[-1500:]}\nsteps: {done}"
        assert r.returncode in README_CODES and r.returncode in allowed, where
        assert "internal error" not in r.stderr, where
        if "--json" in argv and r.stdout.strip():
            if name.startswith("rebalance a slice"):  # one JSON line per event
                [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
            else:
                json.loads(r.stdout)
        assert manifest(root) == before, where
        if name == "replicate" and r.returncode == 0:
            replicated = True
        if replicated and name in ("replicate", "verify", "restore onto the source", "prune dry run"):
            assert backup_manifest(f"{dst.name}/copy") == before, where
    print(f"sequence seed {SEED}: {len(done)} steps, {len(set(done))} kinds of step")
