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
    "rebalance": 6, "refresh": 6, "special": 6, "recover": 6,
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


PROGRAMS = ("zfs", "zpool", "zdb")
# outside rebal/zfs, the modules that still take zfs/argv.py's command lines (this list may only
# shrink): the replicator's receive, built from the receiving end's usage text that the state
# database keeps a day (ZfsHost.abilities asks its own each run: two models of one thing); the gate,
# which recognises the command lines that arrive over ssh by the same builders and runs its own
# queries on the backup host
TAKES_ARGV = {"rebal/gate/check.py"}
# the classes that run ZFS's commands: ZfsHost and the parts it is made of
DOORS = {"ZfsHost", "PoolCalls", "Listings", "FileSystems", "Streams"}


def _builders() -> set[str]:
    """zfs/queries.py's functions that return a command line."""
    tree = ast.parse((ROOT / "zfs" / "queries.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.returns is not None
            and ast.unparse(n.returns) == "list[str]"}


RUNS = {"split", "run", "spawn", "Popen", "check_output", "check_call", "call", "system", "runner", "_zfs", "_zpool"}


def _spliced(n: ast.List) -> bool:
    """[argv[0], argv[1], "-nP", *argv[2:]]: a command line cut open and an option put in."""
    def base(e: ast.AST) -> str | None:
        return ast.unparse(e.value) if isinstance(e, ast.Subscript) else None

    cut = {base(e.value) for e in n.elts if isinstance(e, ast.Starred)} & {base(e) for e in n.elts} - {None}
    return bool(cut) and any(isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.startswith("-")
                             for e in n.elts)


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _command_lines(tree: ast.AST, builders: set[str]) -> list[str]:
    """What in ``tree`` builds or takes a zfs, zpool or zdb command line: a list that starts with the
    program; a string that starts with it handed to a call (split, run, ...); a list spliced from
    another with an option put in; zfs/argv.py imported; queries.py's builders imported."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.List) and n.elts and isinstance(n.elts[0], ast.Constant) and n.elts[0].value in PROGRAMS:
            out.append(f"{n.lineno}: a list starting with {n.elts[0].value!r}")
        elif isinstance(n, ast.Call) and _callee(n) in RUNS and any(
                isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.split(" ")[0] in PROGRAMS
                for a in n.args):
            out.append(f"{n.lineno}: a command line as a string")
        elif isinstance(n, ast.List) and _spliced(n):
            out.append(f"{n.lineno}: a command line spliced with an option")
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.endswith("zfs") and any(
                a.name == "argv" for a in n.names):
            out.append(f"{n.lineno}: zfs/argv.py imported")
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.endswith("zfs.argv"):
            out.append(f"{n.lineno}: zfs/argv.py's builders imported")
        elif isinstance(n, ast.ImportFrom) and n.module and n.module.endswith("zfs.queries") and any(
                a.name in builders for a in n.names):
            out.append(f"{n.lineno}: zfs/queries.py's builders imported")
    return out


def test_only_the_zfs_door_builds_or_runs_zfs_command_lines():
    """One door: outside rebal/zfs nothing builds or takes a zfs, zpool or zdb command line, in any
    form; rebal reaches ZFS through ZfsHost's methods."""
    builders = _builders()
    found = {}
    for p in ROOT.rglob("*.py"):
        rel = str(p.relative_to(ROOT.parent))
        if not rel.startswith("rebal/zfs/") and (lines := _command_lines(ast.parse(p.read_text()), builders)):
            found[rel] = lines
    assert set(found) <= TAKES_ARGV, {k: v for k, v in found.items() if k not in TAKES_ARGV}
    assert TAKES_ARGV - set(found) == set(), f"takes none now: take it off the list {sorted(TAKES_ARGV - set(found))}"


def test_the_command_line_finder_sees_each_form():
    tree = ast.parse('''
from ..zfs import argv
from ..zfs.queries import pool_status, EXPANSION_FEATURE
a = ["zdb", "-C", pool]
run(shlex.split("zpool sync tank"))
b = [send[0], send[1], "-nP", *send[2:]]
log("zfs is fine in words")
''')
    assert [x.split(": ", 1)[1] for x in sorted(_command_lines(tree, _builders()), key=lambda x: int(x.split(":")[0]))] == [
        "zfs/argv.py imported", "zfs/queries.py's builders imported", "a list starting with 'zdb'",
        "a command line as a string", "a command line spliced with an option"]


def test_one_kind_of_class_reaches_zfs():
    """No second door: the classes whose methods build zfs command lines are ZfsHost and its parts
    (the replicator's receive excepted, above)."""
    builders = _builders()
    classes = set()
    for p in ROOT.rglob("*.py"):
        rel = str(p.relative_to(ROOT.parent))
        for c in ast.walk(ast.parse(p.read_text())):
            if isinstance(c, ast.ClassDef) and ("zargv." in (src := ast.unparse(c)) or "queries." in src
                                                or _command_lines(c, builders)):
                classes.add((rel, c.name))
    assert {name for rel, name in classes} == DOORS, classes


# what a hostile key meets on a backup host is rebal/gate and only what it imports: the names it
# checks with, the processes it starts, the zfs command lines it recognises, the local link
GATE_MAY_IMPORT = {"names", "errors", "process", "zfs", "transport", "walk", "gate"}


def test_the_gate_imports_as_little_as_it_can():
    g = graph()
    reached = {m.split(".")[1] for n, deps in g.items() if n.startswith("rebal.gate") for m in deps}
    assert reached <= GATE_MAY_IMPORT, sorted(reached - GATE_MAY_IMPORT)
    assert "rebal.gate.check" in g["rebal.gate.serve"]  # (the graph is read: a sanity check)
