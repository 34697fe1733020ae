"""The rebalance's progress bar on an 80-column terminal: one line, rebal's units, no absurd rate."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from rebal.cli.progress import ProgressEvents


def test_the_rebalance_bar_fits_80_columns_in_rebals_units():
    out = io.StringIO()
    con = Console(file=out, width=80, force_terminal=True, color_system=None, highlight=False)
    prep = SimpleNamespace(pool=SimpleNamespace(name="tank", spread=21.43), method="copy", jobs=4)
    with ProgressEvents(prep, con=con) as ev:
        ev.start(prep, 123456, 987 << 30)
        ev.bar.update(ev.task, completed=800 << 30, files="100000/123456")  # a first update of much at once
        ev.bar.refresh()
    text = out.getvalue()
    lines = [ln for ln in text.replace("\r", "\n").splitlines() if "rebalance" in ln]
    assert lines, text
    last = lines[-1].rstrip()
    assert len(last) <= 80, (len(last), last)
    assert "GB" not in text and "GiB" not in text and "/s" in last, last  # rebal's sizes: 800G, 987G
    assert "800G of 987G" in last and "100000/123456" in last and "spread 21.4" in last, last
    assert "-/s" in last  # no rate before a second has passed: a first big update is not 800 GB/s


def test_without_a_terminal_replication_says_how_far_it_got_in_lines(capsys):
    """A log or the journal gets a line now and then (every minute; here every time), not nothing
    until the end."""
    from rebal.cli.progress import ByteBar

    with ByteBar("replicate nightly", every=0.0) as bar:
        assert bar.wanted and not bar.enabled  # pytest's stderr is no terminal
        bar.update(0, None)
        bar.update(150 << 20, 600 << 20)
        bar.update(600 << 20, 600 << 20)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("replicate nightly: 600M of 600M (estimate) sent, ") and lines[-1].endswith("/s"), lines
    assert any("150M of 600M" in ln for ln in lines), lines
    with ByteBar("replicate nightly", enabled=False) as bar:
        assert not bar.wanted


def test_lines_into_a_file_are_not_wrapped_at_80_columns():
    """Issue 69 (9): rebalance's output into a file wrapped at 80 columns (rich's width without a
    terminal). Into a pipe each line stays whole."""
    import os
    import subprocess
    import sys

    line = "dir /tank/data/" + "x" * 150 + " done"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run([sys.executable, "-c", "from rebal.cli.progress import console; "
                        f"console().print({line!r}, markup=False)"], capture_output=True, text=True, env=env)
    assert r.stdout == line + "\n", r.stdout
