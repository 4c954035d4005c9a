"""The documents a newcomer reads stay true: every path ARCHITECTURE.md names exists, the
environment is read in one place, and the README's table lists every variable read."""

from __future__ import annotations

import re

from paths import REPO

PACKAGE = REPO / "pipelines" / "ccab"
WORKSHOP = REPO / "pipelines" / "ccab_workshop"
PATH_RE = re.compile(r"`([A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-{}<>*]+)+/?)`")


def named_paths(text: str) -> list[str]:
    """Repository paths in backticks (a/b, a/b.py, dir/); globs and placeholders are skipped."""
    out = []
    for p in PATH_RE.findall(text):
        segments = p.rstrip("/").split("/")
        if any(c in p for c in "*<>{}") or p.startswith(("http", "$", "/", "~")):
            continue
        if any(seg.isdigit() or seg.startswith("_") for seg in segments):  # tcp_sample/1, _topic/_offset
            continue
        out.append(p.rstrip("/"))
    return out


def test_every_path_architecture_names_exists():
    text = (REPO / "ARCHITECTURE.md").read_text()
    paths = named_paths(text)
    assert len(paths) > 40  # the codemap is there
    missing = [p for p in paths if not any((root / p).exists() for root in (REPO, PACKAGE, WORKSHOP))]
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_checker_sees_a_wrong_path():
    assert named_paths("see `pipelines/ccab/nope.py` and `sql/views/`") == ["pipelines/ccab/nope.py", "sql/views"]


ENV_READ = re.compile(r"os\.environ\.get\(|os\.environ\[|os\.getenv\(|environ\.get\(\"CCAB_")


def test_only_config_reads_ccab_variables():
    readers = []
    for path in [*PACKAGE.rglob("*.py"), *WORKSHOP.rglob("*.py")]:
        text = path.read_text()
        for m in re.finditer(r"[\"'](CCAB_[A-Z_]+)[\"']", text):
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())]
            if ENV_READ.search(line) and path.name != "config.py":
                readers.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert not readers, "read the environment in ccab/base/config.py only:\n" + "\n".join(readers)


def test_readme_lists_every_variable_config_reads():
    config = (PACKAGE / "base" / "config.py").read_text()
    read = set(re.findall(r"env(?:\.get\(|\[)\"([A-Z_]+)\"", config)) - {"XDG_CACHE_HOME"}
    readme = (REPO / "README.md").read_text()
    table = set(re.findall(r"^\| `([A-Z_]+)` \|", readme, re.M))
    assert read and read <= table, f"missing from README's environment table: {sorted(read - table)}"


# import name -> distribution name where they differ
DISTRIBUTION = {"yaml": "pyyaml", "prometheus_client": "prometheus-client", "clickhouse_connect": "clickhouse-connect",
                "confluent_kafka": "confluent-kafka", "airflow": "apache-airflow", "PIL": "pillow"}


def _third_party_imports(*roots) -> set[str]:
    import ast
    import sys

    local = ({p.stem for p in (REPO / "pipelines" / "tests").rglob("*.py")}
             | {p.stem for p in (REPO / "bench").rglob("*.py")} | {"ccab", "ccab_workshop"})
    mods = set()
    for root in roots:
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    mods |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    mods.add(node.module.split(".")[0])
    return {DISTRIBUTION.get(m, m).replace("_", "-") for m in mods - set(sys.stdlib_module_names) - local}


def test_every_imported_package_is_declared():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = set(project["dependencies"])
    extras = {d for deps in project["optional-dependencies"].values() for d in deps}
    assert _third_party_imports("pipelines/ccab", "pipelines/ccab_workshop", "dags") <= runtime
    assert _third_party_imports("pipelines/tests", "bench") <= runtime | extras
