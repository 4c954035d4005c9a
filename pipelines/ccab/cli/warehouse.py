"""``ccab warehouse serve|up|down|status``: the local warehouse service (:mod:`ccab.warehouse_service`)."""

from __future__ import annotations

import argparse


from ccab.base.config import settings
from ccab.base.errors import UserError

_ENGINE = "the embedded engine at $CCAB_DATA_DIR/warehouse"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ccab warehouse serve|up|down|status``."""
    wh = subparsers.add_parser(
        "warehouse", help="run or check the local warehouse service (owner of the embedded engine)",
        description=("The local warehouse service owns " + _ENGINE + " (chdb: one process per data directory) "
                     "and serves ClickHouse's HTTP interface on 127.0.0.1:CCAB_WAREHOUSE_PORT (default 18123); "
                     "every other ccab process reaches it like a ClickHouse server. Not used when "
                     "CCAB_CLICKHOUSE_URL names a server. State and log: $CCAB_DATA_DIR/warehouse-service/."))
    wh.set_defaults(func=lambda _args: (wh.print_help(), 2)[1])
    actions = wh.add_subparsers(dest="warehouse_action", metavar="ACTION")
    for name, help_, func in (("serve", "run the service in the foreground (systemd runs this)", _cmd_serve),
                              ("up", "start the service in the background unless it runs; wait until it answers", _cmd_up)):
        p = actions.add_parser(name, help=help_)
        p.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: CCAB_WAREHOUSE_PORT or 18123)")
        p.add_argument("--slots", type=int, default=4, metavar="N",
                       help="statements run at once (default 4); one is kept for priority statements "
                            "(ClickHouse setting priority >= 1: the controller's breakers and looks, ccab query)")
        if name == "up":
            p.add_argument("--timeout", type=float, default=60.0, dest="timeout_s", metavar="SECONDS",
                           help="seconds to wait for it to answer (default 60)")
        p.set_defaults(func=func)
    actions.add_parser("down", help="stop this data directory's service").set_defaults(func=_cmd_down)
    actions.add_parser("status", help="show the service; exit 1 when it does not answer").set_defaults(func=_cmd_status)


def _external(action: str) -> None:
    s = settings()
    if s.clickhouse_url:
        raise UserError(f"CCAB_CLICKHOUSE_URL is set: the warehouse is that server, there is no local service to {action}", 2)


def _cmd_serve(args) -> int:
    from ccab.warehouse_service import daemon

    _external("serve")
    if args.slots < 2:
        raise UserError(f"--slots must be at least 2 (one is kept for priority statements), got {args.slots}")
    try:
        daemon.serve(args.port, args.slots)
    except daemon.ServiceError as exc:
        raise UserError(str(exc), 1) from None
    return 0


def _cmd_up(args) -> int:
    from ccab.warehouse_service import daemon

    _external("start")
    if args.slots < 2:
        raise UserError(f"--slots must be at least 2 (one is kept for priority statements), got {args.slots}")
    try:
        daemon.up(args.port, args.timeout_s, args.slots)
    except daemon.ServiceError as exc:
        raise UserError(str(exc), 1) from None
    return 0


def _cmd_down(args) -> int:
    from ccab.warehouse_service import daemon

    _external("stop")
    daemon.down()
    return 0


def _cmd_status(args) -> int:
    from ccab.warehouse_service import daemon

    s = settings()
    if s.clickhouse_url:
        print(f"warehouse: CCAB_CLICKHOUSE_URL is set: {s.clickhouse_url.split('@')[-1]} (no local service)")
        return 0
    doc = daemon.status(s)
    if doc is None:
        print(f"warehouse: not running (engine {s.warehouse_path}, port {s.warehouse_port}): "
              "start it with `ccab warehouse up`")
        return 1
    print(f"warehouse: running (pid {doc['pid']}) at http://127.0.0.1:{s.warehouse_port}, engine {doc['path']}, "
          f"chdb {doc['version']}, up {doc['uptime_s']:.0f} s, {doc['sessions']} sessions, "
          f"{doc['running']} statements running, {doc['queued']} queued")
    return 0



