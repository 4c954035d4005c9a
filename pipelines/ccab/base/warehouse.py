"""The one module that owns the ClickHouse connection.

``connect()`` returns a :class:`Warehouse` reached over ClickHouse's HTTP interface
(clickhouse-connect, :class:`ServerWarehouse`): the server in ``CCAB_CLICKHOUSE_URL`` when it is
set, else the local warehouse service (:mod:`ccab.warehouse_service`, ``ccab warehouse up``), the
one process that owns the embedded engine (chdb) at ``$CCAB_DATA_DIR/warehouse`` — chdb allows one
process per data directory, so the loader, the controller, the DAG tasks and every command share
it through the service. :class:`ChdbWarehouse` (the engine in-process) is for the service itself,
benchmarks of the engine alone and unit tests. The same SQL runs on both; callers never know
which one they have.

SQL uses unqualified table names; the connection's current database is ``ccab`` (or the
database named in the URL path).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol
from urllib.parse import urlparse

import orjson
from ccab.base.config import Settings
from ccab.base.config import settings as current_settings

DEFAULT_DATABASE = "ccab"
_TMP_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class WarehouseError(RuntimeError):
    """A statement failed. ``code`` is ClickHouse's error code (0 when unknown)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


_CODE_RE = re.compile(r"Code: (\d+)\.")


def _error_from(exc: Exception, sql: str) -> WarehouseError:
    text = str(exc)
    m = _CODE_RE.search(text)
    head = sql.strip().splitlines()[0][:120] if sql.strip() else ""
    return WarehouseError(f"{text.strip()}\n  in statement: {head}", int(m.group(1)) if m else 0)


# ClickHouse reads a query parameter's value as *escaped* text (the TSV escaping): a backslash
# starts an escape sequence, so a raw ``\x`` in a value is an error and ``\t`` would become a
# tab. Every string that carries data is escaped here, once, for both engines.
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0", "\b": "\\b",
            "\f": "\\f", "'": "\\'"}
_ESCAPE_RE = re.compile("[\\\\\t\n\r\0\b\f']")


def escape_param(value: str) -> str:
    """``value`` in ClickHouse's escaped-text form: reads back as exactly ``value``."""
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], value)


def _param_text(value: Any) -> str:
    """A parameter value as the text chdb hands to ClickHouse (chdb takes parameters as text;
    clickhouse-connect formats them itself, with the same escaping)."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return escape_param(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join("NULL" if v is None else "'" + escape_param(v) + "'" if isinstance(v, str)
                              else _param_text(v) for v in value) + "]"
    return str(value)


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    types: list[str] = field(default_factory=list)

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


class Warehouse(Protocol):
    database: str
    description: str

    def query(self, sql: str, params: dict | None = None, settings: dict | None = None) -> QueryResult: ...

    def command(self, sql: str, params: dict | None = None, settings: dict | None = None) -> None: ...

    def insert_raw(self, table: str, data: bytes, fmt: str = "JSONEachRow", settings: dict | None = None) -> None: ...

    def query_input(self, sql: str, data: bytes, fmt: str, structure: str,
                    settings: dict | None = None) -> QueryResult:
        """Run ``sql`` where ``{input}`` names ``data`` read as ``fmt`` with ``structure`` (the
        loader classifies a rejected batch's rows this way, in one pass)."""
        ...

    def command_input(self, sql: str, data: bytes | Iterable[bytes], fmt: str, structure: str,
                      params: dict | None = None, settings: dict | None = None) -> None:
        """Run the statement ``sql`` (an ``INSERT ... SELECT``) where ``{input}`` names ``data``
        read as ``fmt`` with ``structure``: how the loader inserts a batch with columns
        ClickHouse adds (the source position of each row). ``data`` may be an iterable of
        chunks (their concatenation is the data), produced while the statement runs: a server
        parses the first while the next are made and sent. If iterating it raises, the statement
        fails with nothing inserted and that exception propagates."""
        ...

    def close(self) -> None: ...


def _settings_clause(settings: dict | None) -> str:
    if not settings:
        return ""
    items = []
    for k, v in settings.items():
        if not re.fullmatch(r"[a-z_0-9]+", k):
            raise ValueError(f"bad setting name {k!r}")
        if isinstance(v, str):
            v = "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        elif isinstance(v, bool):
            v = int(v)
        items.append(f"{k}={v}")
    # on its own line: a statement ending in a `--` comment cannot comment the settings out
    return "\nSETTINGS " + ", ".join(items)


@dataclass
class _SharedSession:
    """The one chdb session of a process and the database it currently USEs."""

    session: Any
    path: Path
    current: str | None = None


@contextlib.contextmanager
def _data_file(data: bytes | Iterable[bytes]) -> Iterator[str]:
    """``data`` (or its chunks) in a private temp file (tmpfs when there is one) for ``file()`` to
    read; removed after."""
    fd, path = tempfile.mkstemp(prefix="ccab-input-", suffix=".data", dir=_TMP_DIR)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, (bytes, bytearray, memoryview)):
                fh.write(data)
            else:
                for chunk in data:
                    fh.write(chunk)
        yield path
    finally:
        os.unlink(path)


def _with_input(sql: str, path: str, fmt: str, structure: str) -> str:
    """``sql`` with its ``{input}`` placeholder naming the data file read as ``fmt`` with ``structure``."""
    if "'" in structure:
        raise ValueError("structure must not contain quotes")
    return sql.replace("{input}", f"file('{path}', {fmt}, '{structure}')")


class ChdbWarehouse:
    """Embedded ClickHouse (chdb) on a directory, in this process. One process at a time may hold
    the path: everything but the warehouse service and unit tests goes through :func:`connect`."""

    def __init__(self, path: Path, database: str = DEFAULT_DATABASE):
        from chdb import session as chdb_session  # heavy import, only when used

        path.mkdir(parents=True, exist_ok=True)
        try:
            session = chdb_session.Session(str(path))
        except Exception as exc:  # chdb raises plain exceptions
            raise WarehouseError(
                f"cannot open the embedded warehouse at {path}: {exc}. Another ccab process may "
                "hold it (only one process at a time can); stop it, or point CCAB_DATA_DIR elsewhere."
            ) from exc
        self._shared = _SharedSession(session, path)
        self._owner = True
        self._use(database)

    def _use(self, database: str) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", database):
            raise ValueError(f"bad database name {database!r}")
        self.database = database
        self.description = f"embedded chdb at {self._shared.path}" + (
            "" if database == DEFAULT_DATABASE else f" (database {database})")
        try:  # before the first USE of it
            self._shared.session.query(f"CREATE DATABASE IF NOT EXISTS {database} ENGINE = Atomic", "CSV")
        except Exception as exc:
            raise _error_from(exc, "CREATE DATABASE") from exc

    @property
    def _session(self):
        return self._shared.session

    def on_database(self, database: str) -> "ChdbWarehouse":
        """The same engine (one chdb session per process) with ``database`` as the current one:
        how one process reaches several shard databases. Closing it leaves the session open."""
        view = object.__new__(ChdbWarehouse)
        view._shared = self._shared
        view._owner = False
        view._use(database)
        return view

    def _run(self, sql: str, fmt: str = "CSV", params: dict | None = None):
        if params:
            params = {k: _param_text(v) for k, v in params.items()}
        shared = self._shared
        try:
            if shared.current != self.database:  # views on several databases share the session
                shared.session.query(f"USE {self.database}", "CSV")
                shared.current = self.database
            return shared.session.query(sql, fmt, params=params or None)
        except Exception as exc:
            raise _error_from(exc, sql) from exc

    def query(self, sql: str, params: dict | None = None, settings: dict | None = None) -> QueryResult:
        sql = sql.strip().rstrip(";") + _settings_clause(
            {"output_format_json_quote_64bit_integers": 0, **(settings or {})}
        )
        res = self._run(sql, "JSONCompact", params)
        raw = res.bytes()
        if not raw.strip():
            return QueryResult([], [])
        doc = orjson.loads(raw)
        return QueryResult(
            [m["name"] for m in doc["meta"]],
            [tuple(r) for r in doc["data"]],
            [m["type"] for m in doc["meta"]],
        )

    def command(self, sql: str, params: dict | None = None, settings: dict | None = None) -> None:
        self._run(sql.strip().rstrip(";") + _settings_clause(settings), "CSV", params)

    def insert_raw(self, table: str, data: bytes, fmt: str = "JSONEachRow", settings: dict | None = None) -> None:
        # ClickHouse parses the bytes, never Python. Reading them with file() is about twice as
        # fast in chdb as inline data after FORMAT (bench/loader), so the batch goes through a
        # private temp file (tmpfs when there is one).
        with _data_file(data) as path:
            self._run(f"INSERT INTO {table} SELECT * FROM file('{path}', {fmt}){_settings_clause(settings)}")

    def query_input(self, sql: str, data: bytes, fmt: str, structure: str,
                    settings: dict | None = None) -> QueryResult:
        with _data_file(data) as path:
            return self.query(_with_input(sql, path, fmt, structure), settings=settings)

    def command_input(self, sql: str, data: bytes | Iterable[bytes], fmt: str, structure: str,
                      params: dict | None = None, settings: dict | None = None) -> None:
        with _data_file(data) as path:
            self.command(_with_input(sql, path, fmt, structure), params, settings)

    def close(self) -> None:
        if not self._owner:
            return
        try:
            self._shared.session.close()
        except Exception:
            pass


LOCAL_DOWN = "the local warehouse is not running: start it with `ccab warehouse up`"


class WarehouseUnavailable(WarehouseError):
    """The warehouse does not answer (the local service is down, the server unreachable): one line."""


def _local_service_problem(port: int, path: Path) -> str | None:
    """Why the local warehouse service on 127.0.0.1:``port`` cannot serve the engine at ``path``
    (not running, or another data directory's), or None when it can."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            served = orjson.loads(r.read()).get("path", "")
    except (OSError, ValueError, urllib.error.URLError):
        return f"{LOCAL_DOWN} (nothing answers on 127.0.0.1:{port}, CCAB_WAREHOUSE_PORT)"
    if Path(served).resolve() != path.resolve():
        return (f"the warehouse service on 127.0.0.1:{port} serves {served}, not {path} (CCAB_DATA_DIR): "
                "start this data directory's with `ccab warehouse up` on another CCAB_WAREHOUSE_PORT")
    return None


_SERVER_ERROR_RE = re.compile(r"(Code: \d+\..*?)(?:\s*\(version [^)]*\))?(?:\s*\(for url [^)]*\))?\s*\Z", re.S)


def _parse_json_compact(raw: bytes) -> QueryResult:
    if not raw.strip():
        return QueryResult([], [])
    doc = orjson.loads(raw)
    return QueryResult([m["name"] for m in doc["meta"]], [tuple(r) for r in doc["data"]],
                       [m["type"] for m in doc["meta"]])


class ServerWarehouse:
    """A ClickHouse server over HTTP via clickhouse-connect: a real server (``CCAB_CLICKHOUSE_URL``)
    or the local warehouse service (:mod:`ccab.warehouse_service`) that owns the embedded engine.

    Results are read as ``JSONCompact`` and parsed like :class:`ChdbWarehouse`'s, so both give the
    same Python values. ``local_path``: the URL is the local service, which must serve that engine
    directory (else :class:`WarehouseUnavailable` with one line saying what to do); its requests
    are not compressed (loopback). ``priority`` (ClickHouse's ``priority`` setting, 1 = highest):
    the local service admits such statements before waiting batch ones, on a slot batch work
    cannot take (the controller's breakers and looks, ``ccab query``)."""

    def __init__(self, url: str, local_path: Path | None = None, priority: int = 0):
        import clickhouse_connect  # only when used

        parsed = urlparse(url)
        database = (parsed.path or "").strip("/") or DEFAULT_DATABASE
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", database):
            raise WarehouseError(f"bad database name {database!r} in the warehouse URL")
        port = parsed.port or (8443 if parsed.scheme == "https" else 8123)
        self._local = local_path is not None
        self._port, self._local_path = port, local_path
        #: a read whose connection to the local service drops (the service was killed or restarted
        #: mid-statement) waits up to this long for the service to answer again and is run once more
        #: (reads only: a write may have landed); :func:`connect` sets it to CCAB_WAREHOUSE_WAIT_S
        self.read_retry_wait_s = 0.0
        if local_path is not None:
            problem = _local_service_problem(port, local_path)
            if problem:
                raise WarehouseUnavailable(problem)
        try:
            client = clickhouse_connect.get_client(
                host=parsed.hostname or "localhost", port=port,
                username=parsed.username or "default", password=parsed.password or "",
                secure=parsed.scheme == "https", compress=not self._local,
                settings={"priority": priority} if priority else None,
            )
            client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
            client.database = database
        except Exception as exc:
            where = "the local warehouse service" if self._local else "ClickHouse at CCAB_CLICKHOUSE_URL="
            raise WarehouseUnavailable(f"cannot reach {where}{parsed.hostname}:{port}: "
                                       f"{' '.join(str(exc).split())[:300]}") from exc
        self._client = client
        self.database = database
        self.description = (f"the local warehouse service 127.0.0.1:{port} (engine {local_path})"
                            + ("" if database == DEFAULT_DATABASE else f", database {database}")
                            if self._local else f"ClickHouse server {parsed.hostname}:{port}/{database}")

    def _error(self, exc: Exception, sql: str) -> WarehouseError:
        """ClickHouse's own message (as the embedded engine words it: from ``Code: N.``, without the
        driver's prefix, the server version and the URL) and code."""
        text = str(exc)
        m = _SERVER_ERROR_RE.search(text)
        if m:
            return _error_from(RuntimeError(m.group(1).strip()), sql)
        if self._local and type(exc).__name__ == "OperationalError":
            return WarehouseUnavailable(f"{LOCAL_DOWN} (it stopped answering: {' '.join(text.split())[:200]})")
        return _error_from(exc, sql)

    def query(self, sql: str, params: dict | None = None, settings: dict | None = None) -> QueryResult:
        try:
            return self._query(sql, params, settings)
        except WarehouseUnavailable as exc:
            if not (self._local and self.read_retry_wait_s > 0 and "stopped answering" in str(exc)):
                raise
            _stderr(f"the local warehouse service stopped answering during a read; waiting up to "
                    f"{self.read_retry_wait_s:g} s (CCAB_WAREHOUSE_WAIT_S) to run it again")
            wait_local(self._service_answers, self.read_retry_wait_s)
        return self._query(sql, params, settings)

    def _service_answers(self) -> ServerWarehouse:
        problem = _local_service_problem(self._port, self._local_path)
        if problem:
            raise WarehouseUnavailable(problem)
        return self

    def _query(self, sql: str, params: dict | None, settings: dict | None) -> QueryResult:
        try:
            raw = self._client.raw_query(sql.strip().rstrip(";"), parameters=params, fmt="JSONCompact",
                                         settings={"output_format_json_quote_64bit_integers": 0, **(settings or {})})
        except Exception as exc:
            raise self._error(exc, sql) from exc
        return _parse_json_compact(raw)

    def command(self, sql: str, params: dict | None = None, settings: dict | None = None) -> None:
        try:
            self._client.command(sql, parameters=params, settings=settings)
        except Exception as exc:
            raise self._error(exc, sql) from exc

    def insert_raw(self, table: str, data: bytes, fmt: str = "JSONEachRow", settings: dict | None = None) -> None:
        try:
            self._client.raw_insert(table, insert_block=data, settings=settings, fmt=fmt)
        except Exception as exc:
            raise self._error(exc, f"INSERT INTO {table}") from exc

    def query_input(self, sql: str, data: bytes, fmt: str, structure: str,
                    settings: dict | None = None) -> QueryResult:
        from clickhouse_connect.driver.external import ExternalData

        ext = ExternalData(file_name="ccab_input", data=data, fmt=fmt, structure=structure)
        try:
            raw = self._client.raw_query(sql.replace("{input}", "ccab_input").strip().rstrip(";"), fmt="JSONCompact",
                                         settings={"output_format_json_quote_64bit_integers": 0, **(settings or {})},
                                         external_data=ext)
        except Exception as exc:
            raise self._error(exc, sql) from exc
        return _parse_json_compact(raw)

    def command_input(self, sql: str, data: bytes | Iterable[bytes], fmt: str, structure: str,
                      params: dict | None = None, settings: dict | None = None) -> None:
        # The rows are the request's body, read by ClickHouse's input('structure') (no multipart
        # form for the server to take apart, no copy of the rows on either side).
        if not re.fullmatch(r"[A-Za-z0-9_]+", fmt):
            raise ValueError(f"bad format name {fmt!r}")
        source = "input('" + structure.replace("\\", "\\\\").replace("'", "\\'") + "')"
        statement = f"{sql.replace('{input}', source).strip().rstrip(';')}\nFORMAT {fmt}"
        if isinstance(data, (bytes, bytearray, memoryview)):
            if not data:
                return  # no rows: the SELECT reads none, nothing is inserted
            try:
                self._client.command(statement, parameters=params, data=bytes(data), settings=settings)
            except Exception as exc:
                raise self._error(exc, sql) from exc
            return
        self._stream_command(statement, data, params, settings, sql)

    def _stream_command(self, statement: str, chunks: Iterable[bytes], params: dict | None,
                        settings: dict | None, sql: str) -> None:
        """``statement`` with ``chunks`` as its body, sent as they are produced (HTTP chunked
        transfer encoding: the server parses the first while the next are made). When producing a
        chunk raises, the request is cut off mid-body, which makes the server's insert fail with
        nothing inserted (ClickHouse, and the warehouse service: ``ABORT_BYTES``), and that
        exception is raised here."""
        from clickhouse_connect.driver.binding import bind_query

        failed: list[BaseException] = []

        def body() -> Iterator[bytes]:
            try:
                for chunk in chunks:
                    if chunk:  # an empty chunk would end the chunked body: the rest would be lost
                        yield chunk
            except BaseException as exc:
                failed.append(exc)
                raise

        client = self._client
        bound, bind_params = bind_query(statement, params, client.server_tz)
        request = {**({"database": client.database} if client.database else {}),
                   **client._validate_settings(settings or {}), **bind_params, "query": bound}
        try:
            client._raw_request(body(), request, headers={"Content-Type": "application/octet-stream"},
                                server_wait=False)
        except Exception as exc:
            if failed:
                raise failed[0] from None
            raise self._error(exc, sql) from exc
        if failed:  # the body was cut off yet the server answered success: never trust it
            raise WarehouseError(f"the server took an insert whose body was cut off ({failed[0]!r})")

    def close(self) -> None:
        self._client.close()


def connect(cfg: Settings | None = None, priority: int = 0, wait_s: float | None = None,
            say: Callable[[str], None] | None = None) -> Warehouse:
    """Open the warehouse the environment selects (see :mod:`ccab.base.config`): the server in
    ``CCAB_CLICKHOUSE_URL``, else the local warehouse service that owns ``$CCAB_DATA_DIR/warehouse``
    (:class:`WarehouseUnavailable` when it is not running). ``priority``: see :class:`ServerWarehouse`.
    A local service that does not answer (a restart, its migrations) is waited for ``wait_s``
    (default ``CCAB_WAREHOUSE_WAIT_S``; ``math.inf``: a service's start, until it answers), saying
    so through ``say`` (default: one line on stderr) when the wait starts and once a minute. A read
    whose connection to the local service drops mid-statement waits as long again and runs once more
    (:attr:`ServerWarehouse.read_retry_wait_s`)."""
    cfg = cfg or current_settings()
    if cfg.clickhouse_url:
        return ServerWarehouse(cfg.clickhouse_url, priority=priority)
    wait_s = cfg.warehouse_wait_s if wait_s is None else wait_s
    wh = wait_local(lambda: ServerWarehouse(cfg.local_warehouse_url, local_path=cfg.warehouse_path,
                                            priority=priority), wait_s, say=say)
    wh.read_retry_wait_s = wait_s
    return wh


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def wait_local(open_: Callable[[], Warehouse], wait_s: float, say: Callable[[str], None] | None = None,
               poll_s: float = 1.0, max_poll_s: float = 5.0, say_every_s: float = 60.0) -> Warehouse:
    """``open_()``, retried while the local warehouse service does not answer, for up to ``wait_s``
    (polls from ``poll_s``, doubling to ``max_poll_s``); ``say`` tells when the wait starts and once
    every ``say_every_s``. Then the service's one-line error, saying how long it waited."""
    import math
    import time

    say = say or _stderr
    started = time.monotonic()
    told = None
    while True:
        try:
            return open_()
        except WarehouseUnavailable as exc:
            down = LOCAL_DOWN in str(exc) or str(exc).startswith("cannot reach the local warehouse service")
            waited = time.monotonic() - started
            if not down or waited + poll_s > wait_s:
                if down and wait_s > 0:
                    raise WarehouseUnavailable(f"{exc}; waited {waited:.0f} s (CCAB_WAREHOUSE_WAIT_S)") from None
                raise
            if told is None or time.monotonic() - told >= say_every_s:
                limit = "until it answers" if math.isinf(wait_s) else f"up to {wait_s:g} s (CCAB_WAREHOUSE_WAIT_S)"
                say(f"waiting for the local warehouse service ({waited:.0f} s so far, {limit}): {exc}")
                told = time.monotonic()
            time.sleep(poll_s)
            poll_s = min(poll_s * 2, max_poll_s)


def shard_database(database: str, shard: int) -> str:
    """The database of shard ``shard`` in the one-engine shard layout (``CCAB_CLICKHOUSE_SHARDS=N``)."""
    return f"{database}_shard{shard}"


def connect_shards(cfg: Settings | None = None) -> list[Warehouse]:
    """One connection per shard of ``CCAB_CLICKHOUSE_SHARDS``, in shard order (the shard of a row
    is ``cityHash64(host) % len(result)``). Without a shard layout: ``[connect(cfg)]``.
    Close them with :func:`close_all`."""
    cfg = cfg or current_settings()
    shards = cfg.clickhouse_shards
    if shards is None:
        return [connect(cfg)]
    if isinstance(shards, tuple):
        out: list[Warehouse] = []
        try:
            for url in shards:
                out.append(ServerWarehouse(url))
        except WarehouseError:
            close_all(out)
            raise
        return out
    parsed = urlparse(cfg.clickhouse_url or cfg.local_warehouse_url)
    local = None if cfg.clickhouse_url else cfg.warehouse_path
    base = (parsed.path or "").strip("/") or DEFAULT_DATABASE
    out = []
    try:
        for k in range(shards):
            out.append(ServerWarehouse(parsed._replace(path="/" + shard_database(base, k)).geturl(), local_path=local))
    except WarehouseError:
        close_all(out)
        raise
    return out


def close_all(warehouses: list[Warehouse]) -> None:
    """Close shard connections (views first, the session's owner last)."""
    for wh in reversed(warehouses):
        wh.close()


def split_statements(sql: str) -> Iterable[str]:
    """Split a SQL script on top-level ``;`` (outside quotes and comments)."""
    buf: list[str] = []
    i, n = 0, len(sql)
    quote: str | None = None
    while i < n:
        c = sql[i]
        if quote:
            buf.append(c)
            if c == "\\" and i + 1 < n:
                buf.append(sql[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in ("'", '"', "`"):
            quote = c
            buf.append(c)
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
            continue
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        elif c == ";":
            stmt = "".join(buf).strip()
            if stmt:
                yield stmt
            buf = []
        else:
            buf.append(c)
        i += 1
    stmt = "".join(buf).strip()
    if stmt:
        yield stmt
