"""The analysts' parameterized views: ``sql/views/<name>.sql`` is view ``<name>`` (one source).

Each file is one SELECT with ``{param:Type}`` placeholders; :func:`install_views` runs
``CREATE OR REPLACE VIEW <name> AS <file>`` for all of them, then queries each once with
harmless arguments (ClickHouse analyses a parameterized view only when it is queried, so a broken
one would otherwise surface in an analyst's query). Views hold no data, so they are
(re)created from their files whenever the cohort job, ``ccab analyze`` or ``ccab plot`` runs,
rather than by a numbered migration: a migration is applied once, by checksum, and an edited view
would need a new migration each time. A view may read another view (``cohort_cdf`` reads
``cohort_pdf``): files are installed in dependency order, found by retrying.

Every ccab command that opens the warehouse calls :func:`install_views`, so it must cost nothing
when nothing changed: each view carries ``COMMENT 'ccab-view-sha256:<hex>'``, the hash of its file
and of the migration files (a migration may change a column a view reads: the view is re-created
and probed again). One query of ``system.tables`` finds the views whose hash differs or that are
missing; only those are (re)created and probed.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ccab.base.config import REPO_ROOT
from ccab.base.schema import MIGRATIONS_DIR
from ccab.base.warehouse import Warehouse, WarehouseError

VIEWS_DIR = REPO_ROOT / "sql" / "views"


def _migrations_digest() -> bytes:
    h = hashlib.sha256()
    for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.digest()


def _tag(sql: str) -> str:
    """The comment a view installed from ``sql`` carries (its file's and the migrations' hash)."""
    return "ccab-view-sha256:" + hashlib.sha256(_migrations_digest() + sql.encode()).hexdigest()


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
    files = view_files(directory)
    sqls = {name: path.read_text().strip().rstrip(";") for name, path in files.items()}
    tags = {name: _tag(sql) for name, sql in sqls.items()}
    installed = dict(wh.query(
        "SELECT name, comment FROM system.tables WHERE database = currentDatabase() AND name IN {names:Array(String)}",
        params={"names": list(files)}).rows) if files else {}
    pending = {name: path for name, path in files.items() if installed.get(name) != tags[name]}
    done: list[str] = []
    last_error: dict[str, WarehouseError] = {}
    while pending:
        progressed = False
        for name, path in list(pending.items()):
            sql = sqls[name]
            try:
                wh.command(f"CREATE OR REPLACE VIEW {name} AS\n{sql}\nCOMMENT '{tags[name]}'")
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
