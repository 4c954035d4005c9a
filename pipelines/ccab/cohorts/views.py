"""The analysts' parameterized views: ``sql/views/<name>.sql`` is view ``<name>`` (one source).

Each file is one SELECT with ``{param:Type}`` placeholders; :func:`install_views` runs
``CREATE OR REPLACE VIEW <name> AS <file>`` for all of them. Views hold no data, so they are
(re)created from their files whenever the cohort job, ``ccab analyze`` or ``ccab plot`` runs,
rather than by a numbered migration: a migration is applied once, by checksum, and an edited view
would need a new migration each time. A view may read another view (``cohort_cdf`` reads
``cohort_pdf``): files are installed in dependency order, found by retrying.
"""

from __future__ import annotations

from pathlib import Path

from ccab.migrate import REPO_ROOT
from ccab.warehouse import Warehouse, WarehouseError

VIEWS_DIR = REPO_ROOT / "sql" / "views"


def view_files(directory: Path = VIEWS_DIR) -> dict[str, Path]:
    """View name -> file, for every ``*.sql`` in ``directory``."""
    return {p.stem: p for p in sorted(directory.glob("*.sql"))}


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
            try:
                wh.command(f"CREATE OR REPLACE VIEW {name} AS\n{path.read_text().strip().rstrip(';')}")
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
