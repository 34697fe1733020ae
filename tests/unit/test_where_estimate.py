"""The sampled `rebal where`: a few big files among many small ones are measured whole, and the
stratified estimate's 95% interval holds the true share in about 95% of seeds."""

import random

from rebal.where import FileObj, estimate, stratify


def population(seed: int = 1) -> tuple[list[FileObj], dict[int, dict[str, int]]]:
    """150 small files spread evenly on two vdevs, 3 large ones almost all on d1 (as after a big
    copy that landed on one vdev): the true share of d0 is far from what the small files say."""
    rnd = random.Random(seed)
    objs, place = [], {}
    for ino in range(2, 152):
        size = rnd.randint(1, 64) << 10
        a = rnd.randint(0, size)
        objs.append(FileObj("p/d", ino, size, b"f%d" % ino))
        place[ino] = {"d0": a, "d1": size - a}
    for ino, mib in ((200, 4), (201, 5), (202, 6)):
        size = mib << 20
        objs.append(FileObj("p/d", ino, size, b"big%d" % ino))
        place[ino] = {"d0": size // 10, "d1": size - size // 10}
    return objs, place


def truth(objs, place) -> float:
    return sum(place[o.ino]["d0"] for o in objs) / sum(o.alloc for o in objs)


def test_the_big_files_are_measured_whole_and_the_budget_is_kept():
    objs, _ = population()
    whole, rest, chosen = stratify(objs, 40, seed=7)
    assert sorted(o.ino for o in whole) == [200, 201, 202]
    assert len(chosen) == 40 and len(rest) == 150 and len({id(o) for o in chosen}) == 40
    assert stratify(objs, 40, seed=7)[2] == chosen  # seeded: the same sample again
    assert stratify(objs, 1000, seed=7)[2] == objs  # a tree within the budget is measured whole


def test_the_interval_holds_the_true_share_in_most_seeds():
    objs, place = population()
    want = truth(objs, place)
    hits, widths = 0, []
    for seed in range(200):
        whole, rest, chosen = stratify(objs, 40, seed)
        in_whole = {id(o) for o in whole}
        est = estimate([(id(o) in in_whole, place[o.ino]) for o in chosen], len(rest))
        share, half = est["d0"]
        widths.append(half)
        hits += abs(share - want) <= half
        assert abs(est["d0"][0] + est["d1"][0] - 1) < 1e-9
    assert hits >= 180, (hits, want)  # ~95% nominal; 90% allows for the small sample
    assert max(widths) < 0.05, max(widths)  # the big files no longer make the estimate swing


def test_a_plain_random_sample_of_the_same_tree_misses_badly():
    """What the stratum fixes: without it (no file counts as big), some seeds are off by > 0.1."""
    objs, place = population()
    want = truth(objs, place)
    worst = 0.0
    for seed in range(200):
        chosen = random.Random(seed).sample(objs, 40)
        est = estimate([(False, place[o.ino]) for o in chosen], len(objs))
        worst = max(worst, abs(est["d0"][0] - want))
    assert worst > 0.1, worst


def test_everything_measured_has_no_interval_and_nothing_measured_has_the_widest():
    objs, place = population()
    assert estimate([(True, place[o.ino]) for o in objs], 0)["d0"][1] == 0.0
    assert estimate([(False, place[o.ino]) for o in objs], len(objs))["d0"][1] == 0.0
    share, half = estimate([(True, place[200])], 150)["d0"]  # 150 others, none measured
    assert abs(share - 0.1) < 1e-3 and half == 1.0
