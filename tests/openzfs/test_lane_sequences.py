"""The sequence test on real OpenZFS 2.4 (bookmark cursors, `zfs rewrite`, receives left unmounted):
the same steps and exit codes as on zfs-fuse (tests/seqsteps.py), 1,000 of them by default, with a
seed drawn anew each run and printed. The full lane runs it: about 5.6 s a step under TCG, 94 minutes
for 1,000 (2026-11-28, seed 234283: 3,578 s in rebal's commands, 2,054 s in the checks, mostly the
tree's and the backup's manifests after each step); by hand:

    bash scripts/test-openzfs.sh --guest-only -k lane_sequences
"""

import pytest
from seqsteps import run_sequence

pytestmark = [pytest.mark.openzfs, pytest.mark.lane_long, pytest.mark.lane_limit(6 * 3600)]  # 1,000 steps: ~1.6 h


def test_a_thousand_random_steps(make_pool, backup_host, tmp_path, request):
    import os
    import random

    steps = request.config.getoption("--sequence-steps") or int(os.environ.get("REBAL_SEQ_STEPS", "1000"))
    seed = request.config.getoption("--sequence-seed")
    if seed is None and os.environ.get("REBAL_SEQ_SEED", "").isdigit():
        seed = int(os.environ["REBAL_SEQ_SEED"])
    if seed is None:
        seed = random.SystemRandom().randrange(10**6)
    print(f"lane sequence: {steps} steps, seed {seed}")
    import json
    import time

    t0 = time.monotonic()
    w = run_sequence(make_pool, backup_host, tmp_path, steps, seed)
    assert w.kills >= 1, w.kill_notes  # a rebalance was killed mid-run at least once
    with open(os.environ.get("REBAL_LANE_FIGURES", "/var/tmp/lane-figures.jsonl"), "a") as f:  # the lane prints it
        f.write(json.dumps({"test": "sequence", "seed": seed, "steps": steps, "kinds": len(w.counts),
                            "kills": w.kills, "seconds": round(time.monotonic() - t0), "counts": w.counts,
                            "spent": {k: [round(a, 1), round(b, 1)] for k, (a, b) in w.seconds.items()}}) + "\n")
