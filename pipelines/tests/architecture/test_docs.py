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
                "confluent_kafka": "confluent-kafka", "airflow": "apache-airflow", "PIL": "pillow",
                "pydantic_core": "pydantic"}  # pydantic's documented home of PydanticCustomError, pinned by it


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


# ----------------------------------------------------------------- the READMEs stay readable

LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(md: str) -> set[str]:
    out, fenced = set(), False
    for line in md.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#+\s+(.*)$", line)):
            out.add(_anchor(m.group(1)))
    return out


def broken_links(path) -> list[str]:
    """Relative links of a Markdown file whose file, or heading anchor, does not exist."""
    bad = []
    text = path.read_text()
    for target in LINK_RE.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            bad.append(target)
    return bad


DOCS_WITH_LIMITS = {"collectors/README.md": 300, "bench/README.md": 300}


def test_readmes_stay_short_and_their_links_resolve():
    """collectors/README.md is an overview (details in docs/collector/), bench/README.md the latest
    figures per benchmark (history in git): both stay short, and every relative link they and
    docs/collector/ hold reaches a file and heading that exist."""
    for rel, limit in DOCS_WITH_LIMITS.items():
        n = len((REPO / rel).read_text().splitlines())
        assert n <= limit, f"{rel} has {n} lines (at most {limit}: move details to docs/)"
    files = [REPO / rel for rel in DOCS_WITH_LIMITS] + sorted((REPO / "docs" / "collector").glob("*.md"))
    bad = {f.relative_to(REPO).as_posix(): b for f in files if (b := broken_links(f))}
    assert not bad, f"links that lead nowhere: {bad}"


def test_the_link_checker_sees_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# Title here\n\n```\n# not a heading\n```\n")
    (tmp_path / "b.md").write_text("[ok](a.md#title-here) [gone](nope.md) [bad anchor](a.md#not-a-heading) [web](https://x)\n")
    assert broken_links(tmp_path / "b.md") == ["nope.md", "a.md#not-a-heading"]
