"""The import graph of rebal/: every import (at the top of a module or inside a function) runs
down the layers below or stays on its own floor, and no modules import each other in a loop."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "rebal"

# floor of each top-level module or package: a module imports only from its floor or below
FLOORS = {
    "cli": 9, "__main__": 9,
    "scheduler": 8,
    "jobs": 7, "views": 7,
    "rebalance": 6, "refresh": 6, "special": 6,
    "replicate": 5, "fill": 5, "watch": 5,
    "recorded": 4, "notify": 4, "state": 4, "health": 4, "metrics": 4, "where": 4, "oldblocks": 4, "readspeed": 4,
    "gate": 4,
    "config": 3, "sandbox": 3, "zfs": 3, "transport": 3,
    "schema": 2, "process": 2, "names": 2, "locks": 2, "units": 2, "ping": 2,
    "throttle": 1, "errors": 1, "outcome": 1, "walk": 1, "migrations": 1, "__init__": 1,
}


def modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The rebal modules ``name`` imports, anywhere in it."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports(n, p, set(mods)) for n, p in mods.items()}


def floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    assert top in FLOORS, f"{module}: give it a floor in tests/unit/test_layers.py FLOORS"
    return FLOORS[top]


def test_every_import_runs_down_or_across():
    up = [(a, b) for a, deps in graph().items() for b in deps if floor(b) > floor(a)]
    assert up == []


def test_no_modules_import_each_other_in_a_loop():
    g = graph()
    state: dict[str, int] = {}
    loops = []

    def visit(n, path):
        state[n] = 1
        for m in sorted(g[n]):
            if state.get(m) == 1:
                loops.append(path[path.index(m):] + [m])
            elif m not in state:
                visit(m, path + [m])
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    assert loops == []


def test_the_graph_is_read():
    g = graph()
    assert "rebal.process.command" in g["rebal.zfs.host"]
    assert "rebal.rebalance.runstate" in g["rebal.rebalance.engine"]
    assert len(g) > 60


def test_only_the_process_layer_starts_processes():
    starters = sorted(n for n, p in modules().items()
                      if any(isinstance(x, (ast.Import, ast.ImportFrom)) and
                             ("subprocess" in [a.name for a in x.names] or getattr(x, "module", None) == "subprocess")
                             for x in ast.walk(ast.parse(p.read_text()))))
    assert starters == ["rebal.process.command", "rebal.process.pipeline"]


def test_no_module_is_over_500_lines():
    assert [(n, c) for n, p in modules().items() if (c := len(p.read_text().splitlines())) > 500] == []


# the gate is an ssh forced command: its stdout and stderr are the channel to the job on the other
# end (its answers, its one-line refusals), written where it runs the command it allowed
SPEAKS = {"rebal/gate/serve.py", "rebal/process/pipeline.py"}
# modules below rebal/zfs that still build zfs/zpool/zdb command lines (issue 46: the host model
# takes them over; this list may only shrink): gate.py and gate_serve.py read and run what arrives
BUILDS_ZFS: set[str] = set()  # every zfs, zpool and zdb command line is built under rebal/zfs/


def _calls(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print":
                out.append("print")
            elif isinstance(f, ast.Attribute) and f.attr in ("write", "echo") and ast.unparse(f.value) in (
                    "sys.stdout", "sys.stderr", "typer"):
                out.append(ast.unparse(f))
    return out


def test_no_function_is_over_80_lines():
    """Issue 46: a function a reader can hold (prepare() was 162 lines, execute() 115)."""
    long = []
    for p in ROOT.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80:
                long.append(f"{p.relative_to(ROOT.parent)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert long == []


def test_nothing_below_the_cli_prints():
    said = {str(p.relative_to(ROOT.parent)): _calls(p) for p in ROOT.rglob("*.py")
            if p.relative_to(ROOT).parts[0] not in ("cli", "__main__.py")}
    assert {p for p, c in said.items() if c} <= SPEAKS, {p: c for p, c in said.items() if c and p not in SPEAKS}


def test_zfs_command_lines_are_built_in_fewer_places():
    """A list literal that starts with "zfs", "zpool" or "zdb" is a command line being built."""
    found = set()
    for p in ROOT.rglob("*.py"):
        rel = str(p.relative_to(ROOT.parent))
        if rel.startswith("rebal/zfs/"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant)
                    and node.elts[0].value in ("zfs", "zpool", "zdb")):
                found.add(rel)
    assert found <= BUILDS_ZFS, sorted(found - BUILDS_ZFS)
    assert BUILDS_ZFS - found == set(), f"no longer builds any: take it off the list {sorted(BUILDS_ZFS - found)}"
    assert found == set(), sorted(found)  # none left outside rebal/zfs/


# what a hostile key meets on a backup host is rebal/gate and only what it imports: the names it
# checks with, the processes it starts, the zfs command lines it recognises, the local link
GATE_MAY_IMPORT = {"names", "errors", "process", "zfs", "transport", "walk", "gate"}


def test_the_gate_imports_as_little_as_it_can():
    g = graph()
    reached = {m.split(".")[1] for n, deps in g.items() if n.startswith("rebal.gate") for m in deps}
    assert reached <= GATE_MAY_IMPORT, sorted(reached - GATE_MAY_IMPORT)
    assert "rebal.gate.check" in g["rebal.gate.serve"]  # (the graph is read: a sanity check)
