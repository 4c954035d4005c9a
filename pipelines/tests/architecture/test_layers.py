"""The package's layers point one way (ARCHITECTURE.md, "Layers").

An AST walk over ``pipelines/ccab``: no module imports a module of a higher layer, the module
graph has no cycle, and no ``ccab`` import hides inside a function body (the one allowed place is
the CLI, which imports its commands' heavy dependencies lazily so ``ccab --help`` stays fast).
``test_the_checker_catches_a_planted_upward_import`` shows the check failing on a planted import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "pipelines" / "ccab"

#: lowest first; a module may import its own layer and the layers below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("ccab.base",)),
    ("engines and sources", ("ccab.ingest", "ccab.kafka", "ccab.sim", "ccab.alerting", "ccab.warehouse_service")),
    ("cohorts", ("ccab.cohorts",)),
    ("judge", ("ccab.judge",)),
    ("rollout", ("ccab.rollout",)),
    ("pipeline", ("ccab.pipeline",)),
    ("presentation and lab", ("ccab.plots", "ccab.report", "ccab.dashboards", "ccab.lab")),
    ("entry points", ("ccab.cli", "ccab.dags")),
]
LAZY_IMPORTS_ALLOWED = ("ccab.cli",)


def layer_of(module: str) -> int:
    if module == "ccab":
        return 0
    for i, (_name, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and ARCHITECTURE.md")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(root: Path, path: Path) -> list[tuple[str, int, bool]]:
    """(imported ccab module, line, inside a function body) for every import in ``path``."""
    mod = module_name(root, path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    inner: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # "from ccab.base import schema" imports the module ccab.base.schema
            names = [f"{prefix}.{a.name}" if (root.parent / f"{prefix}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
                     or (root.parent / f"{prefix}.{a.name}".replace(".", "/")).is_dir() else prefix
                     for a in node.names]
        else:
            continue
        out += [(n, node.lineno, id(node) in inner) for n in names if n == "ccab" or n.startswith("ccab.")]
    return out


def violations(root: Path) -> list[str]:
    problems, graph = [], {}
    for path in sorted(root.rglob("*.py")):
        mod = module_name(root, path)
        me = layer_of(mod)
        graph[mod] = set()
        for target, line, lazy in imports_of(root, path):
            where = f"{path.relative_to(root.parent)}:{line}"
            if target == "ccab" and mod != "ccab":
                continue  # the version string
            graph[mod].add(target)
            them = layer_of(target)
            if them > me:
                problems.append(f"{where}: {mod} ({LAYERS[me][0]}) imports {target} ({LAYERS[them][0]}), a higher layer")
            if lazy and not mod.startswith(LAZY_IMPORTS_ALLOWED):
                problems.append(f"{where}: {mod} imports {target} inside a function: import it at the top "
                                f"(a cycle it would dodge is a layering bug)")
    problems += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m not in graph:
                continue
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def test_layers_point_one_way():
    problems = violations(PACKAGE)
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_planted_upward_import(tmp_path):
    pkg = tmp_path / "ccab"
    for d in ("base", "judge", "cli"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "judge" / "core.py").write_text("from ccab.base import vocab\n")
    (pkg / "base" / "vocab.py").write_text("X = 1\n")
    (pkg / "cli" / "main.py").write_text("def run():\n    from ccab.judge import core\n")
    assert violations(pkg) == []  # downward, and a lazy import in the CLI: allowed
    (pkg / "base" / "vocab.py").write_text("from ccab.judge.core import thing\n")  # planted: base -> judge
    found = violations(pkg)
    assert any("ccab.base.vocab (base) imports ccab.judge.core (judge), a higher layer" in p for p in found), found
    assert any(p.startswith("import cycle") for p in found), found
    (pkg / "base" / "vocab.py").write_text("def f():\n    from ccab.base import other\n")
    (pkg / "base" / "other.py").write_text("")
    assert any("inside a function" in p for p in violations(pkg))
