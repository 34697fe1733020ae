""".ci/run itself (issue 67): a failing suite still says how long it took, and the lane image's build
it started in the background does not outlive the run. The real .ci/run, run by bash in a copy of
the checkout where the heavy parts (the setup, the suite, the image build) are small scripts: the
suite fails once the build is under way; the build is a process that would run for minutes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_failing_suite_says_its_time_and_stops_the_image_build(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    pidfile = tmp_path / "build.pid"
    files = {
        "scripts/setup.sh": "exit 0\n",
        # the suite fails once the build runs (its pid written)
        "scripts/test.sh": f"while [ ! -s {pidfile} ]; do sleep 0.05; done\nexit 3\n",
        "tests/openzfs/vm/guest.py": "import sys\nsys.exit(1)  # --cached: no image here\n",
        "tests/openzfs/vm/build.sh": f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}\nexec sleep 600\n",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    r = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CI="true"))
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert "ci: the test suite took" in r.stdout, r.stdout  # set -e left before this line
    assert "the test suite failed (exit 3)" in r.stderr, r.stderr
    assert "stopping the lane image's build" in r.stderr, r.stderr
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:  # the TERM is sent; its ending is the kernel's
        time.sleep(0.05)
    assert not _alive(pid), "the image build outlived the CI run"
