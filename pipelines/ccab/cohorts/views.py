"""The analysts' parameterized views: ``sql/views/<name>.sql`` is view ``<name>`` (one source).

Each file is one SELECT with ``{param:Type}`` placeholders; :func:`install_views` runs
``CREATE OR REPLACE VIEW <name> AS <file>`` for all of them, then queries each once with
harmless arguments (ClickHouse analyses a parameterized view only when it is queried, so a broken
one would otherwise surface in an analyst's query). Views hold no data, so they are
(re)created from their files whenever the cohort job, ``ccab analyze`` or ``ccab plot`` runs,
rather than by a numbered migration: a migration is applied once, by checksum, and an edited view
would need a new migration each time. A view may read another view (``cohort_cdf`` reads
``cohort_pdf``): files are installed in dependency order, found by retrying.
"""

from __future__ import annotations

import re
from pathlib import Path

from ccab.base.config import REPO_ROOT
from ccab.base.warehouse import Warehouse, WarehouseError

VIEWS_DIR = REPO_ROOT / "sql" / "views"


def view_files(directory: Path = VIEWS_DIR) -> dict[str, Path]:
    """View name -> file, for every ``*.sql`` in ``directory``."""
    return {p.stem: p for p in sorted(directory.glob("*.sql"))}


_PARAM_RE = re.compile(r"\{(\w+):([A-Za-z0-9]+)")


def probe_arguments(sql: str) -> str:
    """``name = value`` for every ``{name:Type}`` of a view, with a harmless value of its type."""
    args = {}
    for name, typ in _PARAM_RE.findall(sql):
        if typ.startswith("DateTime"):
            args[name] = "'2000-01-01 00:00:00'"
        elif typ.startswith(("UInt", "Int", "Float")):
            args[name] = "1"
        else:
            args[name] = "''"
    return ", ".join(f"{k} = {v}" for k, v in args.items())


def install_views(wh: Warehouse, directory: Path = VIEWS_DIR) -> list[str]:
    """Create or replace every view in ``directory``; return their names in install order.

    Raises
    ------
    WarehouseError
        A view's SQL is invalid (the message names the file), or views depend on each other in
        a cycle.
    """
    pending = view_files(directory)
    done: list[str] = []
    last_error: dict[str, WarehouseError] = {}
    while pending:
        progressed = False
        for name, path in list(pending.items()):
            sql = path.read_text().strip().rstrip(";")
            try:
                wh.command(f"CREATE OR REPLACE VIEW {name} AS\n{sql}")
                # a parameterized view is only analysed when queried: probe it once
                wh.query(f"SELECT * FROM {name}({probe_arguments(sql)}) LIMIT 0")
            except WarehouseError as exc:
                last_error[name] = exc
                continue
            done.append(name)
            del pending[name]
            progressed = True
        if not progressed:
            name = next(iter(pending))
            raise WarehouseError(
                f"cannot create view {name} from {pending[name]}: {str(last_error[name])[:800]}\n"
                "Fix the view's SQL (or the view it reads) and re-run.", last_error[name].code)
    return done
