"""Sequences, not single commands: random runs of the public commands, with valid and mistaken
arguments, over a grown zfs-fuse pool and a backup pool behind a real sshd, a rebalance killed
mid-run among them. After every step: the exit code is the one the README's table gives for the
situation the step meets (tests/seqsteps.py), a refusal says why; no traceback and no internal
error (exit 70); `--json` output parses; the data tree equals the manifest taken before the first
step and, once a replication landed, the backup equals it too. Every kind of step is drawn at least
once (the first steps are a shuffle of them all).

    bash scripts/test.sh tests/integration/test_sequences.py --sequence-steps 1000 --sequence-seed 7

The seed is drawn anew each run unless given (REBAL_SEQ_SEED or --sequence-seed), and printed (it is
in every failure message); every bug a sequence finds becomes a named regression test of its own."""

import random

import pytest
from seqsteps import World, draws, run_sequence, steps

pytestmark = pytest.mark.zfs


def test_every_kind_of_step_is_drawn():
    kinds = len(steps(World("p", "p/d", "b/copy", "/p/d", "/tmp/t", "top/f")))  # the table's, not a number by hand
    rnd = random.Random(1)
    assert kinds > 40 and 60 >= kinds  # the default 60 steps draw every kind
    assert sorted(draws(kinds, 60, rnd)[:kinds]) == list(range(kinds)) and len(draws(kinds, 60, rnd)) == 60


def test_random_sequences_of_commands(make_pool, backup_host, tmp_path, sequence):
    run_sequence(make_pool, backup_host, tmp_path, *sequence)
