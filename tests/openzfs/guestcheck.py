"""Run inside the lane's guest by the power-cut test (python3 guestcheck.py CMD ROOT [SAVED]): make
the tree and save its manifest, or check the tree against a saved manifest. Prints one JSON line."""

import json
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fsenv import manifest, temp_leftovers  # noqa: E402
from treegen import mixed_tree  # noqa: E402


def main() -> None:
    cmd, root, saved = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd == "make":
        mixed_tree(root, small=400, large=12, large_mib=(4, 8), seed=18)
    if cmd in ("make", "save"):
        with open(saved + ".new", "wb") as f:
            pickle.dump(manifest(root), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(saved + ".new", saved)
        print(json.dumps({"saved": saved}))
        return
    with open(saved, "rb") as f:
        want = pickle.load(f)
    have = manifest(root)
    diff = sorted({repr(k) for k in set(want) | set(have) if want.get(k) != have.get(k)})
    print(json.dumps({"same": not diff, "differ": diff[:10], "ndiff": len(diff),
                      "examples": [{"path": d, "want": repr(want.get(eval(d)))[:300], "have": repr(have.get(eval(d)))[:300]}
                                   for d in diff[:3]],
                      "temps": [os.fsdecode(p) for p in temp_leftovers(root)]}))


main()
