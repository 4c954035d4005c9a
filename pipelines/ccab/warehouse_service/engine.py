"""Statements in the embedded engine, for the warehouse service's HTTP interface.

chdb (4.4) allows several sessions on one data directory inside one process; they share the
engine (tables, parts, caches) and each has its own current database, settings and temporary
tables. A statement releases the GIL while it runs, and statements of different sessions run in
parallel (measured: ``bench/warehouse``). So:

- a client session (``session_id``, which clickhouse-connect sends on every request) gets its own
  chdb session, kept until ``session_timeout`` seconds (default 60, as ClickHouse) without a
  request: its temporary tables (the loader's staging tables) live as long as on a server. Two
  requests of one session run one after the other (a server refuses the second; we queue it).
  A request without ``session_id`` gets a fresh chdb session, closed after it.
- admission: at most ``slots`` statements run at once; batch statements may use all but
  ``reserved`` of them, statements with ClickHouse's ``priority`` setting >= 1 (the controller's
  breakers and looks, ``ccab query``) may use every slot and are admitted before waiting batch
  statements. So a breaker never queues behind the hourly job's statements.
- the request's ``database`` and settings are applied to its chdb session with ``USE`` and ``SET``
  (only what differs from the session's last request), the statement runs with its bind
  parameters, and its output format is the statement's ``FORMAT`` clause or ``default_format``.
- an ``INSERT ... FORMAT f`` with data runs as ``INSERT ... FROM INFILE`` of the data written to a
  private tmpfs file; an ``INSERT ... SELECT ... FROM input('structure') FORMAT f`` (the rows are
  the request's body, as on a ClickHouse server) reads a private named pipe with ``file()`` where
  the statement names ``input()``, the body written into it as it arrives, while the statement
  runs (:meth:`Engine._run_streamed`); an external table (multipart upload) is read by ``file()`` from one, named
  where the statement names the table.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import tempfile
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ccab.base.warehouse import DEFAULT_DATABASE

_TMP_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
DEFAULT_SLOTS = 4
DEFAULT_RESERVED = 1
DEFAULT_SESSION_TIMEOUT_S = 60.0
MAX_SESSION_TIMEOUT_S = 3600.0
#: bucket bounds (seconds) of the queue-wait and statement-duration histograms
BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)
#: what goes into a streamed insert's pipe after a body that ended early: whatever the JSON (or
#: any text format's) reader was in the middle of, ``{{`` cannot continue it and no string closes
#: before the end, so the statement fails and nothing is inserted (the insert is one block)
ABORT_BYTES = b"\n{{{{"
#: bytes a streamed insert's pipe holds (Linux's default is 64 KiB; the engine reads 1 MiB at a time)
PIPE_BYTES = 1 << 20

_CODE_RE = re.compile(r"Code: (\d+)\.")
_QUERY_WORD_RE = re.compile(rb"\b(?:SELECT|VALUES|WITH)\b", re.I)
_INSERT_RE = re.compile(rb"\A\s*INSERT\s+INTO\s+(.+?)\s+FORMAT\s+([A-Za-z0-9_]+)[ \t]*(?:\r?\n)?", re.S | re.I)
_SETTINGS_RE = re.compile(r"\s+SETTINGS\s+", re.I)
_FORMAT_CLAUSE_RE = re.compile(r"\bFORMAT\s+([A-Za-z0-9_]+)\s*;?\s*\Z", re.I)
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# ClickHouse's input('structure') table function (an INSERT ... SELECT reading the request's
# body), found after replace_identifier marked the word where it is an identifier
_INPUT_MARK = "\x00input\x00"
_INPUT_CALL_RE = re.compile(r"\x00input\x00\s*\(\s*'((?:[^'\\]|\\.)*)'\s*\)")
_INSERT_SELECT_FORMAT_RE = re.compile(r"\A\s*INSERT\s+INTO\s.*\bFORMAT\s+([A-Za-z0-9_]+)\s*;?\s*\Z", re.I | re.S)


class StatementError(Exception):
    """A statement failed; ``code`` is ClickHouse's error code (0 when the text names none)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


class BodyAborted(Exception):
    """A streamed request body ended before its end (the client disconnected, the chunked
    encoding was malformed): raised by the body's iterator; the insert it fed then fails."""


def error_of(exc: Exception) -> StatementError:
    text = str(exc).strip()
    m = _CODE_RE.search(text)
    return StatementError(text, int(m.group(1)) if m else 0)


@dataclass
class ExternalTable:
    """A multipart-uploaded table (``--external`` in ClickHouse's terms)."""

    name: str
    data: bytes
    fmt: str = "TabSeparated"
    structure: str = ""


@dataclass
class Request:
    """One statement as the HTTP layer parsed it."""

    sql: str  # an insert with rows: its target, ``t [(c1, c2)] [SETTINGS ...]``; with ``input_structure``: the
    # whole INSERT ... SELECT, ``{input}`` where its input('...') call was
    data: bytes | memoryview | Iterable[bytes] | None = None  # the rows of an INSERT ... FORMAT f; an
    # iterable (the body as it arrives, may raise BodyAborted) only with ``input_structure``: streamed
    insert_format: str = ""
    input_structure: str = ""  # the structure of an INSERT ... SELECT ... FROM input('...') FORMAT f
    database: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    session_id: str | None = None
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    default_format: str = "TabSeparated"
    external: list[ExternalTable] = field(default_factory=list)
    query_id: str = ""

    @property
    def priority(self) -> int:
        try:
            return max(0, int(self.settings.get("priority", "0")))
        except ValueError:
            return 0


@dataclass
class Result:
    body: bytes
    fmt: str
    summary: dict[str, str]
    query_id: str


def split_insert(text: bytes) -> tuple[str, str, memoryview] | None:
    """``INSERT INTO <target> FORMAT <f>\\n<data>`` -> (target, f, data); None when ``text`` is
    not an insert with inline data (ClickHouse's HTTP interface takes the data after the
    statement's ``FORMAT`` in the same body)."""
    m = _INSERT_RE.match(text[:65536])
    if not m or _QUERY_WORD_RE.search(m.group(1)):  # INSERT ... SELECT ... FORMAT f: a query, no data
        return None
    return m.group(1).decode(), m.group(2).decode(), memoryview(text)[m.end():]  # no copy of the rows


def split_input_insert(sql: str) -> tuple[str, str, str] | None:
    """``INSERT INTO t ... SELECT ... FROM input('structure') ... FORMAT f`` (ClickHouse's way to
    transform rows sent as the request's body) -> (the statement without its ``FORMAT`` clause
    and with ``{input}`` where the ``input(...)`` call was, f, structure); None when ``sql`` is
    not such an insert (exactly one ``input()`` call, outside quotes and comments)."""
    m = _INSERT_SELECT_FORMAT_RE.match(sql)
    if not m or "\x00" in sql or "{input}" in sql:
        return None
    marked = replace_identifier(sql[:m.start(1)].rstrip()[:-len("FORMAT")].rstrip(), "input", _INPUT_MARK)
    calls = list(_INPUT_CALL_RE.finditer(marked))
    if len(calls) != 1 or marked.count(_INPUT_MARK) != 1:
        return None
    call = calls[0]
    structure = re.sub(r"\\(.)", r"\1", call.group(1))
    return marked[:call.start()] + "{input}" + marked[call.end():], m.group(1), structure


def replace_identifier(sql: str, name: str, replacement: str) -> str:
    """``sql`` with every bare identifier ``name`` outside quotes and comments replaced (how an
    external table's name becomes the ``file()`` that reads it)."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            j = i + 1
            while j < n and sql[j] != c:
                j += 2 if sql[j] == "\\" else 1
            out.append(sql[i:j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            word = sql[i:j]
            prev = sql[i - 1] if i else ""
            out.append(replacement if word == name and prev != "." else word)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _TempFiles:
    """Private tmpfs files holding a request's data; removed when the request ends."""

    def __init__(self):
        self.paths: list[str] = []
        self.fifo_path = ""

    def fifo(self) -> str:
        """A private named pipe the engine's ``file()`` reads while the body is written into it."""
        path = os.path.join(_TMP_DIR or tempfile.gettempdir(), f"ccab-whsvc-{uuid.uuid4().hex}.fifo")
        os.mkfifo(path, 0o600)
        self.paths.append(path)
        self.fifo_path = path
        return path

    def write(self, data: bytes | memoryview) -> str:
        fd, path = tempfile.mkstemp(prefix="ccab-whsvc-", suffix=".data", dir=_TMP_DIR)
        self.paths.append(path)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return path

    def close(self) -> None:
        for p in self.paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


class _Session:
    """One chdb session and what was last applied to it."""

    def __init__(self, chdb_session: Any, timeout_s: float):
        self.chdb = chdb_session
        self.lock = threading.Lock()
        self.database = "default"
        self.settings: dict[str, str] = {}
        self.timeout_s = timeout_s
        self.last_used = time.monotonic()
        self.closed = False

    def prepare(self, database: str | None, settings: dict[str, str]) -> None:
        """``USE`` the request's database and ``SET`` what differs from the last request."""
        if database and database != self.database:
            if not _IDENT_RE.match(database):
                raise StatementError(f"Code: 81. DB::Exception: Database {database!r} is not a plain name. "
                                     "(UNKNOWN_DATABASE)", 81)
            self._run(f"USE {database}")
            self.database = database
        for k in [k for k in self.settings if k not in settings]:
            self._run(f"SET {k} = DEFAULT")
            del self.settings[k]
        for k, v in settings.items():
            if self.settings.get(k) != v:
                if not _IDENT_RE.match(k):
                    raise StatementError(f"Code: 115. DB::Exception: Unknown setting {k!r}. (UNKNOWN_SETTING)", 115)
                self._run(f"SET {k} = {_quote(v)}")
                self.settings[k] = v

    def _run(self, sql: str, fmt: str = "CSV", params: dict | None = None):
        try:
            return self.chdb.query(sql, fmt, params=params or None)
        except Exception as exc:
            raise error_of(exc) from None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.chdb.close()
            except Exception:
                pass


class Histogram:
    def __init__(self, bounds: tuple[float, ...] = BUCKETS_S):
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0
        self.sum = 0.0

    def observe(self, v: float) -> None:
        for i, b in enumerate(self.bounds):
            if v <= b:
                self.counts[i] += 1
        self.total += 1
        self.sum += v


class Admission:
    """At most ``slots`` statements at once; batch ones may use ``slots - reserved``; priority
    ones are admitted first (FIFO within each kind)."""

    def __init__(self, slots: int = DEFAULT_SLOTS, reserved: int = DEFAULT_RESERVED):
        if slots < 1 or not 0 <= reserved < slots:
            raise ValueError(f"need slots >= 1 and 0 <= reserved < slots, got {slots}, {reserved}")
        self.slots, self.reserved = slots, reserved
        self.running = 0
        self.running_batch = 0
        self._cond = threading.Condition()
        self._waiting: dict[bool, deque] = {True: deque(), False: deque()}

    def _may_run(self, urgent: bool, ticket: object) -> bool:
        if self._waiting[urgent][0] is not ticket or self.running >= self.slots:
            return False
        if urgent:
            return True
        return not self._waiting[True] and self.running_batch < self.slots - self.reserved

    def acquire(self, urgent: bool) -> float:
        """Wait for a slot; returns the seconds waited."""
        start = time.monotonic()
        ticket = object()
        with self._cond:
            self._waiting[urgent].append(ticket)
            while not self._may_run(urgent, ticket):
                self._cond.wait()
            self._waiting[urgent].popleft()
            self.running += 1
            self.running_batch += 0 if urgent else 1
            self._cond.notify_all()
        return time.monotonic() - start

    def release(self, urgent: bool) -> None:
        with self._cond:
            self.running -= 1
            self.running_batch -= 0 if urgent else 1
            self._cond.notify_all()

    @property
    def queued(self) -> int:
        return len(self._waiting[True]) + len(self._waiting[False])


class Engine:
    """The embedded engine at ``path`` and its client sessions."""

    def __init__(self, path: Path, slots: int = DEFAULT_SLOTS, reserved: int = DEFAULT_RESERVED):
        from chdb import session as chdb_session  # heavy import, only in the service

        self._new_session = lambda: chdb_session.Session(str(path))
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.root = self._new_session()  # keeps the engine open while client sessions come and go
        self.root.query(f"CREATE DATABASE IF NOT EXISTS {DEFAULT_DATABASE} ENGINE = Atomic", "CSV")
        self.version = self.root.query("SELECT version()", "CSV").bytes().decode().strip().strip('"')
        self.admission = Admission(slots, reserved)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._metrics_lock = threading.Lock()
        self.statements: dict[tuple[str, str], int] = {}
        self.errors: dict[int, int] = {}
        self.aborted_bodies = 0
        self.queue_wait = {"priority": Histogram(), "batch": Histogram()}
        self.duration = {"priority": Histogram(), "batch": Histogram()}
        self.started = time.time()

    # --- sessions ---

    def _session(self, req: Request) -> tuple[_Session, bool]:
        """The request's session and whether it is private to this request."""
        if not req.session_id:
            return _Session(self._new_session(), 0), True
        with self._lock:
            s = self._sessions.get(req.session_id)
            if s is None or s.closed:
                s = _Session(self._new_session(), min(max(req.session_timeout_s, 1.0), MAX_SESSION_TIMEOUT_S))
                self._sessions[req.session_id] = s
            s.last_used = time.monotonic()
            return s, False

    def expire_sessions(self) -> int:
        """Close the client sessions idle past their timeout; returns how many."""
        now = time.monotonic()
        closed = 0
        with self._lock:
            for sid, s in list(self._sessions.items()):
                if now - s.last_used > s.timeout_s and s.lock.acquire(blocking=False):
                    try:
                        del self._sessions[sid]
                        s.close()
                        closed += 1
                    finally:
                        s.lock.release()
        return closed

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    # --- statements ---

    def execute(self, req: Request) -> Result:
        urgent = req.priority > 0
        kind = "priority" if urgent else "batch"
        statement = "insert" if req.data is not None else "query"
        session, private = self._session(req)
        files = _TempFiles()
        try:
            with session.lock:
                wait_s = self.admission.acquire(urgent)
                start = time.monotonic()
                try:
                    session.prepare(req.database, req.settings)
                    sql, fmt = self._statement(req, files)
                    if files.fifo_path:
                        res = self._run_streamed(session, sql, fmt, req.params, req.data, files.fifo_path)
                    else:
                        res = session._run(sql, fmt, req.params)
                finally:
                    self.admission.release(urgent)
                    session.last_used = time.monotonic()
                    elapsed = time.monotonic() - start
                    with self._metrics_lock:
                        self.queue_wait[kind].observe(wait_s)
                        self.duration[kind].observe(elapsed)
                        self.statements[(statement, kind)] = self.statements.get((statement, kind), 0) + 1
        except StatementError as exc:
            with self._metrics_lock:
                self.errors[exc.code] = self.errors.get(exc.code, 0) + 1
            raise
        finally:
            files.close()
            if private:
                session.close()
        body = res.bytes() if res is not None else b""
        summary = {"read_rows": res.rows_read(), "read_bytes": res.bytes_read(),
                   "written_rows": res.rows_written(), "written_bytes": res.bytes_written(),
                   "elapsed_ns": int(res.elapsed() * 1e9)} if res is not None else {}
        summary.update(result_rows=0, result_bytes=len(body), total_rows_to_read=summary.get("read_rows", 0))
        return Result(body, fmt, {k: str(v) for k, v in summary.items()}, req.query_id or str(uuid.uuid4()))

    def _statement(self, req: Request, files: _TempFiles) -> tuple[str, str]:
        """The SQL chdb runs for ``req`` and its output format."""
        sql = req.sql.strip()
        if req.data is not None and req.input_structure:  # INSERT ... SELECT ... FROM input(...): the rows
            if not _IDENT_RE.match(req.insert_format) or "'" in req.input_structure:
                raise StatementError(f"Code: 36. DB::Exception: bad input() format or structure. (BAD_ARGUMENTS)", 36)
            streamed = not isinstance(req.data, (bytes, bytearray, memoryview))
            path = files.fifo() if streamed else files.write(req.data)
            source = f"file({_quote(path)}, {req.insert_format}, {_quote(req.input_structure)})"
            return sql.replace("{input}", source, 1), req.default_format
        if req.data is not None:
            if not isinstance(req.data, (bytes, bytearray, memoryview)):
                req.data = b"".join(req.data)  # only input() inserts are streamed
            parts = _SETTINGS_RE.split(sql, 1)
            target = parts[0]
            rest = f" SETTINGS {parts[1]}" if len(parts) > 1 else ""
            path = files.write(req.data)
            return f"INSERT INTO {target} FROM INFILE {_quote(path)}{rest} FORMAT {req.insert_format}", req.default_format
        for ext in req.external:
            if not _IDENT_RE.match(ext.name) or not _IDENT_RE.match(ext.fmt) or "'" in ext.structure:
                raise StatementError(f"Code: 36. DB::Exception: bad external table {ext.name!r}. (BAD_ARGUMENTS)", 36)
            path = files.write(ext.data)
            sql = replace_identifier(sql, ext.name, f"file({_quote(path)}, {ext.fmt}, {_quote(ext.structure)})")
        m = _FORMAT_CLAUSE_RE.search(sql)
        return sql, (m.group(1) if m else req.default_format)

    def _run_streamed(self, session: _Session, sql: str, fmt: str, params: dict, body: Iterable[bytes],
                      fifo: str):
        """Run ``sql`` (which reads ``fifo`` with ``file()``) in a thread while this one writes the
        request body into the pipe as it arrives: the engine parses while the rest is in transit.
        A body that ends early (:class:`BodyAborted`) gets :data:`ABORT_BYTES` after what came,
        so the statement fails and nothing is inserted; its error names the abort. A statement that
        fails or stops reading early: the rest of the body is read and dropped (the connection stays
        usable) and the engine's error is the answer."""
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["res"] = session._run(sql, fmt, params)
            except StatementError as exc:
                outcome["err"] = exc
            except Exception as exc:  # the engine's failure, whatever its type, is the statement's
                outcome["err"] = error_of(exc)

        engine = threading.Thread(target=run, name="warehouse-streamed-insert", daemon=True)
        engine.start()
        try:
            aborted = _pump(fifo, body, engine)
        finally:
            engine.join()
        if aborted is not None:
            with self._metrics_lock:
                self.aborted_bodies += 1
            if "res" in outcome:  # cannot happen (ABORT_BYTES parse nowhere): say so loudly
                raise StatementError(f"Code: 1001. DB::Exception: the request body ended early ({aborted}) yet the "
                                     "insert succeeded: rows may be missing. (STD_EXCEPTION)", 1001)
            raise StatementError(f"Code: 33. DB::Exception: the request body ended early ({aborted}): the insert "
                                 "failed, nothing was inserted. (CANNOT_READ_ALL_DATA)", 33)
        if "err" in outcome:
            raise outcome["err"]
        return outcome["res"]

    def close(self) -> None:
        with self._lock:
            for s in self._sessions.values():
                s.close()
            self._sessions.clear()
        try:
            self.root.close()
        except Exception:
            pass

    # --- metrics ---

    def metrics_text(self) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help_: str) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")

        with self._metrics_lock:
            family("ccab_warehouse_statements_total", "counter", "Statements run, by statement (query, insert) and priority.")
            for (st, kind), n in sorted(self.statements.items()):
                out.append(f'ccab_warehouse_statements_total{{statement="{st}",priority="{kind}"}} {n}')
            family("ccab_warehouse_errors_total", "counter", "Statements that failed, by ClickHouse error code.")
            for code, n in sorted(self.errors.items()):
                out.append(f'ccab_warehouse_errors_total{{code="{code}"}} {n}')
            for name, hists, help_ in (
                    ("ccab_warehouse_queue_wait_seconds", self.queue_wait,
                     "Seconds a statement waited for a slot (priority: ClickHouse setting priority >= 1)."),
                    ("ccab_warehouse_statement_seconds", self.duration, "Seconds a statement ran in the engine.")):
                family(name, "histogram", help_)
                for kind, h in hists.items():
                    for b, c in zip(h.bounds, h.counts):
                        out.append(f'{name}_bucket{{priority="{kind}",le="{b}"}} {c}')
                    out.append(f'{name}_bucket{{priority="{kind}",le="+Inf"}} {h.total}')
                    out.append(f'{name}_sum{{priority="{kind}"}} {h.sum:.6f}')
                    out.append(f'{name}_count{{priority="{kind}"}} {h.total}')
            family("ccab_warehouse_aborted_bodies_total", "counter",
                   "Streamed inserts whose request body ended early (client gone, malformed chunked encoding): "
                   "failed, nothing inserted.")
            out.append(f"ccab_warehouse_aborted_bodies_total {self.aborted_bodies}")
        family("ccab_warehouse_running_statements", "gauge", "Statements running now.")
        out.append(f"ccab_warehouse_running_statements {self.admission.running}")
        family("ccab_warehouse_queued_statements", "gauge", "Statements waiting for a slot now.")
        out.append(f"ccab_warehouse_queued_statements {self.admission.queued}")
        family("ccab_warehouse_sessions", "gauge", "Client sessions open (session_id).")
        out.append(f"ccab_warehouse_sessions {self.session_count}")
        return "\n".join(out) + "\n"


def _pump(fifo: str, body: Iterable[bytes], engine: threading.Thread) -> BodyAborted | None:
    """Write ``body`` into ``fifo`` as it arrives, for the statement running in ``engine``; at the
    end close the pipe (the reader's end of input). Returns the :class:`BodyAborted` when the body
    ended early (then :data:`ABORT_BYTES` went in after what came). A reader that is gone (the
    statement failed, or finished without reading to the end) gets nothing more; the rest of the
    body is read all the same."""
    fd = -1
    while fd < 0:  # open once the engine has opened its end (never blocks: the engine may fail first)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if not engine.is_alive():
                break
            engine.join(0.001)
    if fd >= 0:
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # above /proc/sys/fs/pipe-max-size: the default size works too
    try:
        try:
            for chunk in body:
                if fd >= 0 and not _write_all(fd, chunk, engine):
                    os.close(fd)
                    fd = -1
        except BodyAborted as exc:
            if fd >= 0:
                _write_all(fd, ABORT_BYTES, engine)
            return exc
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def _write_all(fd: int, data: bytes | memoryview, engine: threading.Thread) -> bool:
    """Write ``data`` to the non-blocking pipe ``fd``, waiting while it is full; False when the
    reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            if not engine.is_alive():
                return False
            select.select([], [fd], [], 0.1)
        except BrokenPipeError:
            return False
    return True
