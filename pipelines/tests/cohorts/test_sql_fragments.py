"""The job's SQL loader puts shared fragments (cohorts/sql/_*.sql) where a statement says
`-- include: _name.sql`: the per-connection metrics are declared once (issue 27, item 4)."""

from __future__ import annotations

import re

from ccab.cohorts import job


def test_includes_are_replaced_by_the_fragment_text():
    sql = job.read_sql("connection_cells.sql")
    assert not re.search(r"^-- include:", sql, re.MULTILINE)
    assert "cohorts AS (" in sql and "metric_names" in sql
    for name in ("connection_metrics.sql", "network_metrics.sql", "network_cells.sql"):
        assert "connection_values AS (" in job.read_sql(name)


def test_the_metric_list_stands_in_one_file_only():
    # the value list of the per-connection metrics: one file declares it, the statements include it
    declaring = [p.name for p in job.SQL_DIR.glob("*.sql") if "CAST(sndbuf_limited_pct" in p.read_text()]
    assert declaring == ["_connection_values.sql"]


def test_fragments_are_not_steps_and_every_include_resolves():
    steps = {f for f, _ in job.STEPS}
    fragments = {p.name for p in job.SQL_DIR.glob("_*.sql")}
    assert fragments and not fragments & steps
    for p in job.SQL_DIR.glob("*.sql"):
        for name in re.findall(r"^-- include: (\S+)", p.read_text(), re.MULTILINE):
            assert name in fragments, f"{p.name} includes {name}, which is not a fragment"


def test_a_fragment_is_part_of_the_code_version(tmp_path):
    for p in job.SQL_DIR.glob("*.sql"):
        (tmp_path / p.name).write_text(p.read_text())
    before = job.code_version(tmp_path)
    (tmp_path / "_connection_values.sql").write_text(job.read_sql("_connection_values.sql") + "\n-- changed\n")
    assert job.code_version(tmp_path) != before
