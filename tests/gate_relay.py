"""A hostile file server's rsync transport (`rsync -e "python3 gate_relay.py"`): it runs the gate as
sshd would (SSH_ORIGINAL_COMMAND), waits until the gate has checked the line and started rsync (its
first bytes out), then plays the second connection: it swaps the checked destination directory for a
symlink to a directory outside the gate's mount point, and only then passes the server's greeting on.
The client sends its file list only after that greeting, and rsync enters its destination when the
file list arrives, so the swap always falls between the gate's check and rsync's use: no timing, no
sleep.

Environment: GATE_ARGV (JSON argument list of the gate), SWAP (the directory to swap, or empty: no
swap), SWAP_TO (where the symlink points)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main() -> int:
    line = " ".join(sys.argv[2:])  # ssh joins the remote command's words with spaces
    env = dict(os.environ, SSH_ORIGINAL_COMMAND=line)
    gate = subprocess.Popen(json.loads(os.environ["GATE_ARGV"]), stdout=subprocess.PIPE, env=env)  # stdin: the client's
    out = sys.stdout.buffer
    first = True
    while True:
        b = os.read(gate.stdout.fileno(), 65536)
        if first and b and os.environ.get("SWAP"):  # the rsync server's greeting: the gate let it run
            swap = os.environ["SWAP"]
            os.rename(swap, swap + ".moved")
            os.symlink(os.environ["SWAP_TO"], swap)
        first = False
        if not b:
            break
        out.write(b)
        out.flush()
    return gate.wait()


if __name__ == "__main__":
    sys.exit(main())
