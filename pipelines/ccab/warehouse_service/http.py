"""The warehouse service's HTTP interface: the part of ClickHouse's that clickhouse-connect uses.

``POST /`` and ``GET /`` run one statement: the ``query`` parameter and/or the body (an
``INSERT ... FORMAT f`` takes its rows from the rest of the body, or from the whole body when the
statement is in ``query``; so does ``INSERT ... SELECT ... FROM input('structure') FORMAT f`` in
``query``, the rows transformed by its ``SELECT``), ``database``, ``session_id``/``session_timeout``, ``default_format``,
``query_id``, ``param_<name>`` bind parameters, every other parameter a ClickHouse setting
(the HTTP-only ones — compression, progress headers — are accepted and ignored: responses are not
compressed and carry no progress headers); request bodies may be compressed (``Content-Encoding``
gzip, deflate, zstd, lz4); ``multipart/form-data`` carries external tables (``<name>_format``,
``<name>_structure``) and form-encoded ``query``/``param_*``. Answers: the engine's bytes with
``X-ClickHouse-Summary``, ``X-ClickHouse-Format``, ``X-ClickHouse-Query-Id``; an error is HTTP 500
with ``X-ClickHouse-Exception-Code`` and ClickHouse's ``Code: N. DB::Exception: ...`` text.
``GET /ping`` answers ``Ok.``; ``GET /healthz`` a JSON status (its data directory, pid, version);
``GET /metrics`` Prometheus text. No authentication: the service listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from ccab.warehouse_service.engine import (BodyAborted, Engine, ExternalTable, Request, StatementError, split_input_insert,
                                           split_insert)

#: request parameters that are not settings (ClickHouse's HTTP interface's own)
NOT_SETTINGS = {"query", "database", "default_format", "session_id", "session_timeout", "session_check",
                "query_id", "user", "password", "quota_key", "compress", "decompress", "buffer_size",
                "wait_end_of_query", "stacktrace", "close_session", "client_protocol_version", "role"}
#: settings that shape the HTTP exchange only: accepted, not applied
HTTP_ONLY_SETTINGS = {"enable_http_compression", "send_progress_in_http_headers", "http_headers_progress_interval_ms",
                      "cancel_http_readonly_queries_on_client_close", "http_zlib_compression_level",
                      "http_response_buffer_size", "http_wait_end_of_query", "add_http_cors_header"}
SWEEP_INTERVAL_S = 5.0
#: the most a streamed body is read at a time
BODY_READ_BYTES = 1 << 20


class Body:
    """A request body as it arrives, chunk by chunk (``Transfer-Encoding: chunked`` or
    ``Content-Length``). Iterating it raises :class:`BodyAborted` when the body ends early (the
    client disconnected) or the chunked encoding is malformed; ``complete`` says whether it was
    read to its end (else the connection cannot carry another request)."""

    def __init__(self, rfile, headers):
        self.rfile = rfile
        self.chunked = headers.get("Transfer-Encoding", "").lower() == "chunked"
        self.length = int(headers.get("Content-Length") or 0)
        self.complete = False
        self._started = False

    def __iter__(self):
        if self._started:
            raise RuntimeError("a request body is read once")
        self._started = True
        try:
            yield from (self._chunked() if self.chunked else self._sized(self.length))
        except (OSError, ValueError) as exc:  # the socket failed (reset, timeout)
            raise BodyAborted(f"reading it failed: {exc}") from None
        self.complete = True

    def _sized(self, left: int):
        while left > 0:
            data = self.rfile.read(min(left, BODY_READ_BYTES))
            if not data:
                raise BodyAborted(f"the connection closed {left} bytes before its end")
            left -= len(data)
            yield data

    def _chunked(self):
        while True:
            line = self.rfile.readline(1024)
            if not line.endswith(b"\n"):
                raise BodyAborted("malformed chunked encoding: a chunk size line of 1 KiB" if len(line) >= 1024
                                  else "the connection closed before the last chunk")
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BodyAborted(f"malformed chunked encoding: chunk size {line[:40]!r}") from None
            if size < 0:
                raise BodyAborted(f"malformed chunked encoding: chunk size {line[:40]!r}")
            if size == 0:
                while (trailer := self.rfile.readline(1024)) not in (b"\r\n", b"\n"):
                    if not trailer:
                        raise BodyAborted("the connection closed in the trailer")
                return
            yield from self._sized(size)
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise BodyAborted("malformed chunked encoding: no line end after a chunk")

    def drain(self) -> None:
        """Read what is left of the body and drop it (an answer before the body is read)."""
        if not self._started:
            try:
                for _ in self:
                    pass
            except BodyAborted:
                pass


def streams_body(params: dict[str, str], headers) -> bool:
    """Whether the request's body is streamed into the engine as it arrives: the rows of an
    ``INSERT ... SELECT ... FROM input('structure') FORMAT f`` in ``query``, sent uncompressed."""
    sql = params.get("query", "")
    content_type = headers.get("Content-Type", "") or ""
    return bool(sql) and headers.get("Content-Encoding", "identity").strip().lower() in ("", "identity") \
        and not content_type.startswith(("multipart/form-data", "application/x-www-form-urlencoded")) \
        and split_insert(sql.encode() + b"\n") is None and split_input_insert(sql) is not None


def _decompress(data: bytes, encoding: str) -> bytes:
    """A request body sent with ``Content-Encoding`` (gzip, deflate, zstd, lz4, br): decoded by
    clickhouse-connect's own codec table, the client whose bodies these are."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    from clickhouse_connect.driver._backend.httpcommon import decompress_response

    try:
        return decompress_response(data, encoding)
    except Exception as exc:
        raise StatementError(f"Code: 36. DB::Exception: cannot decode a {encoding!r} body: {exc}. (BAD_ARGUMENTS)",
                             36) from None


def _multipart(body: bytes, content_type: str) -> tuple[dict[str, str], dict[str, bytes]]:
    """(form fields, files by field name) of a multipart/form-data body."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise StatementError("Code: 36. DB::Exception: multipart body without a boundary. (BAD_ARGUMENTS)", 36)
    delim = b"--" + m.group(1).encode()
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for part in body.split(delim)[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        content = content.removesuffix(b"\r\n")
        disposition = next((ln for ln in head.decode("latin-1").split("\r\n")
                            if ln.lower().startswith("content-disposition")), "")
        name = re.search(r'\bname="([^"]*)"', disposition)
        if not name:
            continue
        if re.search(r'\bfilename="', disposition):
            files[name.group(1)] = content
        else:
            fields[name.group(1)] = content.decode()
    return fields, files


def parse_request(method: str, target: str, headers, body: bytes | Body) -> Request:
    """The statement an HTTP request asks for. ``body``: the bytes, or (:func:`streams_body`) the
    :class:`Body` as it arrives, then the request's data."""
    params = dict(parse_qsl(urlsplit(target).query, keep_blank_values=True))
    if isinstance(body, Body) and not streams_body(params, headers):
        body = b"".join(body)
    if headers.get("Content-Encoding"):
        body = _decompress(body, headers["Content-Encoding"])
    content_type = headers.get("Content-Type", "") or ""
    files: dict[str, bytes] = {}
    if content_type.startswith("multipart/form-data"):
        fields, files = _multipart(body, content_type)
        params.update(fields)
        body = b""
    elif content_type.startswith("application/x-www-form-urlencoded"):
        params.update(parse_qsl(body.decode(), keep_blank_values=True))
        body = b""
    externals = [ExternalTable(name, data, params.get(f"{name}_format", "TabSeparated"),
                               params.get(f"{name}_structure", "")) for name, data in files.items()]
    ext_params = {f"{e.name}_{k}" for e in externals for k in ("format", "structure", "types")}
    sql = params.get("query", "")
    data: bytes | None = None
    insert_format = input_structure = ""
    split = split_insert(sql.encode() + b"\n") if sql else None
    transform = split_input_insert(sql) if sql and split is None and not externals else None
    if transform is not None:  # INSERT ... SELECT ... FROM input('s') FORMAT f in `query`, rows in the body
        sql, insert_format, input_structure = transform
        data = body
    elif split is not None and not bytes(split[2]).strip():  # statement in `query`, rows in the body
        sql, insert_format, _ = split
        data = body
    else:  # the statement (and an insert's rows) in the body, after `query` if both (a copy: small bodies)
        text = sql.encode() + (b"\n" + body if sql and body else body)
        if (split := split_insert(text)) is not None:
            sql, insert_format, data = split
        else:
            sql = text.decode()
    if not sql.strip():
        raise StatementError("Code: 62. DB::Exception: Empty query. (SYNTAX_ERROR)", 62)
    settings = {k: v for k, v in params.items()
                if k not in NOT_SETTINGS and k not in HTTP_ONLY_SETTINGS and k not in ext_params
                and not k.startswith("param_")}
    try:
        timeout_s = float(params.get("session_timeout") or 60)
    except ValueError:
        raise StatementError("Code: 36. DB::Exception: session_timeout must be a number. (BAD_ARGUMENTS)", 36) from None
    return Request(sql=sql, data=data, insert_format=insert_format, input_structure=input_structure, database=params.get("database") or None,
                   settings=settings, params={k[6:]: v for k, v in params.items() if k.startswith("param_")},
                   session_id=params.get("session_id") or None, session_timeout_s=timeout_s,
                   default_format=params.get("default_format") or "TabSeparated", external=externals,
                   query_id=params.get("query_id", ""))


class WarehouseHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: Engine, log=None):
        self.engine = engine
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: answers go out at once: with Nagle's algorithm on, the body (a second write after the
    #: headers) waited for the client's delayed ACK, 40 ms on Linux, on every statement
    disable_nagle_algorithm = True
    server: WarehouseHTTPServer

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature; errors are logged below
        pass

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:  # the client is gone (e.g. it aborted a streamed insert): nothing to answer
            self.close_connection = True

    def do_GET(self):  # noqa: N802 - http.server's name
        path = urlsplit(self.path).path
        engine = self.server.engine
        if path == "/ping":
            return self._send(200, b"Ok.\n", {"Content-Type": "text/plain; charset=UTF-8"})
        if path == "/healthz":
            doc = {"status": "ok", "path": str(engine.path), "pid": os.getpid(), "version": engine.version,
                   "uptime_s": round(time.time() - engine.started, 1), "sessions": engine.session_count,
                   "running": engine.admission.running, "queued": engine.admission.queued}
            return self._send(200, json.dumps(doc).encode() + b"\n", {"Content-Type": "application/json"})
        if path == "/metrics":
            return self._send(200, engine.metrics_text().encode(), {"Content-Type": "text/plain; version=0.0.4"})
        if path != "/":
            return self._send(404, b"Not found\n", {"Content-Type": "text/plain"})
        return self._statement(b"")

    def do_POST(self):  # noqa: N802
        if urlsplit(self.path).path != "/":
            self._read_body()
            return self._send(404, b"Not found\n", {"Content-Type": "text/plain"})
        if streams_body(dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True)), self.headers):
            return self._statement(Body(self.rfile, self.headers))
        return self._statement(self._read_body())

    def _statement(self, body: bytes | Body) -> None:
        engine = self.server.engine
        stream = body if isinstance(body, Body) else None
        try:
            try:
                req = parse_request(self.command, self.path, self.headers, body)
                del body
                res = engine.execute(req)
            finally:
                if stream is not None:  # answered before the body was read (e.g. a bad setting): read it
                    stream.drain()
                    if not stream.complete:  # the body ended early: this connection carries nothing more
                        self.close_connection = True
        except StatementError as exc:
            text = f"{exc} (version {engine.version})\n".encode()
            code = exc.code
            if code not in (60, 81, 62, 47):  # unknown table/database, syntax, unknown identifier: the caller's
                self.server.log(f"{time.strftime('%Y-%m-%d %H:%M:%S')} statement failed: {str(exc)[:300]}")
            return self._send(500, text, {"Content-Type": "text/plain; charset=UTF-8",
                                          "X-ClickHouse-Exception-Code": str(code),
                                          "X-ClickHouse-Server-Display-Name": "ccab-warehouse"})
        except Exception as exc:  # a bug here must still answer, with a code the client can read
            self.server.log(f"{time.strftime('%Y-%m-%d %H:%M:%S')} internal error: {exc!r}")
            return self._send(500, f"Code: 1001. DB::Exception: {exc!r}. (STD_EXCEPTION)\n".encode(),
                              {"Content-Type": "text/plain; charset=UTF-8", "X-ClickHouse-Exception-Code": "1001"})
        ctype = ("text/tab-separated-values; charset=UTF-8" if res.fmt.startswith("TabSeparated")
                 else "application/json; charset=UTF-8" if res.fmt.startswith("JSON")
                 else "application/octet-stream")
        self._send(200, res.body, {"Content-Type": ctype, "X-ClickHouse-Format": res.fmt,
                                   "X-ClickHouse-Query-Id": res.query_id,
                                   "X-ClickHouse-Server-Display-Name": "ccab-warehouse",
                                   "X-ClickHouse-Timezone": "UTC",
                                   "X-ClickHouse-Summary": json.dumps(res.summary, separators=(",", ":"))})


def serve(engine: Engine, host: str, port: int, stop: threading.Event, log=None,
          ready=None) -> None:
    """Serve ``engine`` on ``host:port`` until ``stop`` is set; expire idle sessions meanwhile."""
    httpd = WarehouseHTTPServer((host, port), engine, log)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                              name="warehouse-http")
    thread.start()
    if ready is not None:
        ready(httpd.server_address[1])
    try:
        while not stop.wait(SWEEP_INTERVAL_S):
            engine.expire_sessions()
    finally:
        httpd.shutdown()
        httpd.server_close()
