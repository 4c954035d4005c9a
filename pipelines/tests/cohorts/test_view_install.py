"""install_views runs in every command that opens the warehouse: it re-creates only what changed."""

from __future__ import annotations

import shutil

from ccab.cohorts.views import VIEWS_DIR, install_views, view_files


class _Counting:
    """The real warehouse, counting the DDL statements sent to it."""

    def __init__(self, wh):
        self.wh = wh
        self.commands: list[str] = []

    def command(self, sql, *args, **kwargs):
        self.commands.append(sql)
        return self.wh.command(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.wh, name)


def _created(commands: list[str]) -> set[str]:
    return {c.split()[4] for c in commands if c.startswith("CREATE OR REPLACE VIEW")}


def test_second_install_creates_nothing_and_an_edited_or_dropped_view_is_recreated(warehouse, tmp_path):
    views = tmp_path / "views"
    shutil.copytree(VIEWS_DIR, views)
    names = set(view_files(views))
    assert len(names) >= 2

    first = _Counting(warehouse)
    assert set(install_views(first, views)) == names
    assert _created(first.commands) == names

    again = _Counting(warehouse)
    assert install_views(again, views) == []
    assert again.commands == []

    edited, dropped = sorted(names)[:2]
    path = views / f"{edited}.sql"
    path.write_text(path.read_text().rstrip().rstrip(";") + "\n-- edited\n")
    warehouse.command(f"DROP VIEW {dropped}")
    third = _Counting(warehouse)
    assert set(install_views(third, views)) == {edited, dropped}
    assert _created(third.commands) == {edited, dropped}
    # the re-created views answer (probed on install, and here through the warehouse)
    assert warehouse.query(f"SELECT count() FROM system.tables WHERE database = currentDatabase() "
                           f"AND name IN ('{edited}', '{dropped}')").rows[0][0] == 2
