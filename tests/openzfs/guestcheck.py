"""Run inside the lane's guest by the power-cut test (python3 guestcheck.py CMD ...): make the tree,
record its manifest, check it after a cut. Prints one JSON line."""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fsenv import manifest, temp_leftovers  # noqa: E402
from treegen import mixed_tree  # noqa: E402


def digest(root: str) -> str:
    m = manifest(root)
    return hashlib.sha256(repr(sorted(m.items(), key=lambda kv: repr(kv[0]))).encode()).hexdigest()


def main() -> None:
    cmd, root = sys.argv[1], sys.argv[2]
    if cmd == "make":
        mixed_tree(root, small=400, large=12, large_mib=(4, 8), seed=18)
        print(json.dumps({"digest": digest(root)}))
    elif cmd == "check":
        print(json.dumps({"digest": digest(root), "temps": [os.fsdecode(p) for p in temp_leftovers(root)]}))


main()
