"""``ccab query "SQL"``: run one statement against the warehouse and print the result."""

from __future__ import annotations

import csv
import json
import re
import sys

from ccab.base.config import REPO_ROOT
from ccab.base.errors import UserError
from ccab.base.warehouse import QueryResult, WarehouseError, connect

_INTERNAL = re.compile(r"\s*SETTINGS output_format_json_quote_64bit_integers\s*=\s*0\b|,\s*readonly\s*=\s*2\b|\s*FORMAT JSONCompact\b")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`|--[^\n]*|/\*.*?\*/", re.S)


def check_statement(sql: str) -> str:
    """The one statement a user typed, or a :class:`UserError` saying why it cannot run: empty,
    several statements, or a ``FORMAT`` clause (``--format`` chooses the output)."""
    bare = _QUOTED.sub(" ", sql)  # literals and comments cannot end a statement
    if not bare.strip().rstrip(";").strip():
        raise UserError("empty statement: give one SQL statement, e.g. ccab query \"SELECT count() FROM tcp_samples\"")
    if ";" in bare.strip().rstrip(";").rstrip():
        raise UserError("one statement at a time: run each statement as its own ccab query")
    if re.search(r"\bFORMAT\s+\w+\s*;?\s*$", bare, re.I):
        raise UserError("the statement has a FORMAT clause: drop it and choose the output with --format table|csv|json")
    return sql.strip().rstrip(";")


def user_message(exc: WarehouseError) -> str:
    """ClickHouse's message as one line, without the settings ccab adds to every query."""
    text = _INTERNAL.sub("", str(exc))
    text = " ".join(text.split())
    text = re.sub(r"(Expected one of: )[^.]{60,}", r"\1…", text)  # ClickHouse's list of every token
    return text if len(text) <= 400 else text[:400] + " …"


def _objects() -> tuple[list[str], list[str]]:
    """Tables (from sql/migrations, without the internal landing/check/stage ones) and views."""
    tables: list[str] = []
    for f in sorted((REPO_ROOT / "sql" / "migrations").glob("*.sql")):
        for name in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", f.read_text()):
            if not re.search(r"_(landing|check|stage)$", name) and name not in tables:
                tables.append(name)
    views = sorted(f.stem for f in (REPO_ROOT / "sql" / "views").glob("*.sql"))
    return tables, views


def format_table(res: QueryResult, max_rows: int | None = None) -> str:
    """Plain aligned text table (numbers right-aligned), no dependencies, pipe-friendly."""
    rows = res.rows if max_rows is None else res.rows[:max_rows]
    cells = [[("NULL" if v is None else str(v)) for v in r] for r in rows]
    widths = [len(c) for c in res.columns]
    for r in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, r)]
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) or r[i] is None for r in rows)
               for i in range(len(res.columns))]

    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [line(res.columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    if max_rows is not None and len(res.rows) > max_rows:
        out.append(f"... {len(res.rows) - max_rows} more rows")
    return "\n".join(out)


def _cmd_query(args) -> int:
    sql = check_statement(sys.stdin.read() if args.sql == "-" else args.sql)
    if args.max_rows < 0:
        raise UserError("--max-rows must be 0 or more")
    try:
        wh = connect(priority=1)  # a person waits: ahead of queued batch work on the local service
    except WarehouseError as exc:
        raise UserError(user_message(exc), 1) from None
    try:
        # read-only unless --write: ClickHouse itself refuses every statement that writes or
        # changes the schema (readonly = 2 still lets the client set its output settings)
        res = wh.query(sql, settings=None if args.write else {"readonly": 2})
    except WarehouseError as exc:
        if not args.write and "Cannot modify 'readonly' setting" in str(exc):
            raise UserError("read-only: a statement cannot change the readonly setting; use --write", 1) from None
        if not args.write and "(READONLY)" in str(exc):
            raise UserError("read-only: this statement writes or changes the warehouse; ccab query runs "
                            "read-only unless given --write", 1) from None
        raise UserError(user_message(exc), 1) from None
    finally:
        wh.close()
    if args.format == "json":
        print(json.dumps(res.dicts(), default=str, indent=1))
    elif args.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(res.columns)
        w.writerows(res.rows)
    elif res.columns:
        print(format_table(res, args.max_rows))
    return 0


def register(sub) -> None:
    tables, views = _objects()
    p = sub.add_parser("query", help="run SQL against the warehouse and print a table",
                       description="Run one SQL statement against the warehouse (embedded chdb or the "
                                   "server in CCAB_CLICKHOUSE_URL). Tables: " + ", ".join(tables)
                                   + ". Parameterized views (sql/README.md): " + ", ".join(views) + ".")
    p.add_argument("sql", help='one statement without FORMAT (use --format), or "-" to read it from stdin')
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="output: an aligned table, CSV with a header row, or a JSON array of objects "
                        "(default: %(default)s)")
    p.add_argument("--max-rows", type=int, default=200, help="rows shown in table format (default: %(default)s)")
    p.add_argument("--write", action="store_true",
                   help="allow statements that write or change the warehouse (INSERT, ALTER, DROP, CREATE, "
                        "TRUNCATE, OPTIMIZE...); without it ccab query is read-only (ClickHouse's readonly setting)")
    p.set_defaults(func=_cmd_query)
