"""The local warehouse service: one long-running process owns the embedded engine (chdb) at
``$CCAB_DATA_DIR/warehouse`` and serves the subset of ClickHouse's HTTP interface that
clickhouse-connect uses, so every other ccab process reaches it the way it reaches a ClickHouse
server (:class:`ccab.base.warehouse.ServerWarehouse`).

- :mod:`ccab.warehouse_service.engine` — statements in chdb: one chdb session per client session
  (``session_id``), admission with a reserved slot for priority statements, metrics.
- :mod:`ccab.warehouse_service.http` — the HTTP interface (``/``, ``/ping``, ``/healthz``, ``/metrics``).
- :mod:`ccab.warehouse_service.daemon` — ``ccab warehouse up|down|status``: pid file, log, port.
"""
