"""``ccab query "SQL"``: run one statement against the warehouse and print the result."""

from __future__ import annotations

import csv
import json
import sys

from ccab.base.warehouse import QueryResult, WarehouseError, connect


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
    sql = sys.stdin.read() if args.sql == "-" else args.sql
    try:
        wh = connect()
    except WarehouseError as exc:
        print(f"ccab query: {exc}", file=sys.stderr)
        return 1
    try:
        res = wh.query(sql)
    except WarehouseError as exc:
        print(f"ccab query: {exc}", file=sys.stderr)
        return 1
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
    p = sub.add_parser("query", help="run SQL against the warehouse and print a table",
                       description="Run one SQL statement against the warehouse (embedded chdb or the "
                                   "server in CCAB_CLICKHOUSE_URL). Tables: tcp_samples, http_requests, "
                                   "assignments, agent_status, dead_letters.")
    p.add_argument("sql", help='the statement, or "-" to read it from stdin')
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--max-rows", type=int, default=200, help="rows shown in table format (default: %(default)s)")
    p.set_defaults(func=_cmd_query)
