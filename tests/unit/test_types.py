"""Issue 46: every parameter of rebal/zfs, rebal/process and rebal/replicate is typed, and mypy finds
nothing there."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rebal"
TYPED = ("zfs", "process", "replicate", "recover", "gate")


def test_every_parameter_is_typed():
    bare = []
    for pkg in TYPED:
        for p in (ROOT / pkg).rglob("*.py"):
            for n in ast.walk(ast.parse(p.read_text())):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    bare += [f"{p.name}:{n.lineno} {n.name}({a.arg})" for a in n.args.args + n.args.kwonlyargs
                             if a.arg not in ("self", "cls") and a.annotation is None]
    assert bare == []


def test_mypy_is_clean(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                        "--cache-dir", str(tmp_path), *(str(ROOT / p) for p in TYPED)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
