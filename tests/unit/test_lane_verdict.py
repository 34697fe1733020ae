"""The lane's verdict: a lane passes only when every test it holds ran and passed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "openzfs" / "vm"))
from lane import collected, counts, verdict  # noqa: E402


def test_collection_lines_of_pytest():
    assert collected("a::b\nc::d\n\n2 tests collected in 0.31s\n") == 2
    assert collected("x\n31/612 tests collected (581 deselected) in 2.04s\n") == 31
    assert collected("1 test collected in 0.1s") == 1
    assert collected("\nno tests collected (612 deselected) in 1.9s\n") == 0
    with pytest.raises(ValueError):
        collected("ERROR tests/x.py - ImportError\n1 error in 0.2s\n")


def test_nothing_collected_fails_unless_k_narrowed_it():
    assert verdict(5, {}, 0, narrowed=False)[0] == 1
    assert verdict(5, {}, 0, narrowed=True)[0] == 0
    # pytest exits 0 on "no tests ran" when every test was deselected by -m: still nothing proven
    assert verdict(0, {}, 0, narrowed=False)[0] == 1


def test_a_skip_fails_the_lane():
    got = counts("s.\n=== 30 passed, 1 skipped in 100.0s ===\n")
    assert got == {"passed": 30, "skipped": 1}
    rc, why = verdict(0, got, 31, narrowed=False)
    assert rc == 1 and "skipped" in why


def test_fewer_passed_than_collected_fails():
    rc, why = verdict(0, {"passed": 29}, 31, narrowed=False)
    assert rc == 1 and "29 passed of the 31" in why


def test_failures_and_interrupts():
    assert verdict(1, {"passed": 30, "failed": 1}, 31, narrowed=False)[0] == 1
    assert verdict(2, {"passed": 3}, 31, narrowed=False)[0] == 2  # interrupted
    assert verdict(1, {"passed": 30, "error": 1}, 31, narrowed=False)[0] == 1


def test_all_held_passed():
    rc, why = verdict(0, {"passed": 31}, 31, narrowed=False)
    assert rc == 0 and why == "31 passed of the 31 collected"
