"""The package's layers point one way (ARCHITECTURE.md, "Layers").

An AST walk over ``pipelines/ccab`` (the product) and ``pipelines/ccab_workshop`` (the workshop:
simulator, lab, local Kafka, local Airflow): no module imports a module of a higher layer, the
module graph has no cycle, no ``ccab`` import hides inside a function body (the one allowed place is
the CLI, which imports its commands' heavy dependencies lazily so ``ccab --help`` stays fast), and
the product never imports the workshop (only the CLI may, for ``ccab sim|lab|kafka …``).
``test_the_checker_catches_a_planted_upward_import`` and
``test_the_checker_catches_a_product_import_of_the_workshop`` show the check failing on planted
imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "pipelines" / "ccab"
WORKSHOP = REPO / "pipelines" / "ccab_workshop"

#: lowest first; a module may import its own layer and the layers below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("ccab.base",)),
    ("engines and sources", ("ccab.ingest", "ccab.kafka", "ccab.alerting", "ccab.warehouse_service")),
    ("cohorts", ("ccab.cohorts",)),
    ("judge", ("ccab.judge",)),
    ("rollout", ("ccab.rollout",)),
    ("pipeline", ("ccab.pipeline",)),
    ("presentation", ("ccab.plots", "ccab.report", "ccab.dashboards")),
    ("workshop", ("ccab_workshop",)),
    ("entry points", ("ccab.cli", "ccab.dags")),
]
LAZY_IMPORTS_ALLOWED = ("ccab.cli",)
#: the only product modules that may import the workshop (``ccab sim|lab|kafka …``)
WORKSHOP_IMPORTS_ALLOWED = ("ccab.cli",)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def is_ours(module: str) -> bool:
    return _under(module, ("ccab", "ccab_workshop"))


def layer_of(module: str) -> int:
    if module == "ccab":
        return 0
    for i, (_name, prefixes) in enumerate(LAYERS):
        if _under(module, prefixes):
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
        out += [(n, node.lineno, id(node) in inner) for n in names if is_ours(n)]
    return out


def violations(*roots: Path) -> list[str]:
    """Every layering problem of the packages at ``roots`` (siblings: ``ccab``, ``ccab_workshop``)."""
    problems, graph = [], {}
    for root, path in sorted((root, path) for root in roots for path in root.rglob("*.py")):
        mod = module_name(root, path)
        me = layer_of(mod)
        graph[mod] = set()
        for target, line, lazy in imports_of(root, path):
            where = f"{path.relative_to(root.parent)}:{line}"
            if target == "ccab" and mod != "ccab":
                continue  # the version string
            graph[mod].add(target)
            them = layer_of(target)
            if _under(target, ("ccab_workshop",)) and not _under(mod, ("ccab_workshop",) + WORKSHOP_IMPORTS_ALLOWED):
                problems.append(f"{where}: {mod} (product) imports {target} (workshop): the product never "
                                f"imports the workshop; only {', '.join(WORKSHOP_IMPORTS_ALLOWED)} may")
            elif them > me:
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
    problems = violations(PACKAGE, WORKSHOP)
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


def test_the_checker_catches_a_product_import_of_the_workshop(tmp_path):
    pkg, shop = tmp_path / "ccab", tmp_path / "ccab_workshop"
    for d in (pkg / "base", pkg / "dags", pkg / "cli", shop / "sim"):
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (shop / "__init__.py").write_text("")
    (pkg / "base" / "vocab.py").write_text("X = 1\n")
    (shop / "sim" / "gen.py").write_text("from ccab.base import vocab\n")  # the workshop uses the product
    (pkg / "cli" / "sim.py").write_text("def run():\n    from ccab_workshop.sim import gen\n")  # the CLI reaches it
    assert violations(pkg, shop) == []
    # planted: a product module of the top layer (dags, beside the CLI) and one of the bottom
    (pkg / "dags" / "tasks.py").write_text("from ccab_workshop.sim import gen\n")
    (pkg / "base" / "other.py").write_text("import ccab_workshop.sim.gen\n")
    found = violations(pkg, shop)
    assert any(p.startswith("ccab/dags/tasks.py:1: ccab.dags.tasks (product) imports ccab_workshop.sim.gen (workshop)")
               for p in found), found
    assert any(p.startswith("ccab/base/other.py:1: ccab.base.other (product) imports ccab_workshop.sim.gen (workshop)")
               for p in found), found
