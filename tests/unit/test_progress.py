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
