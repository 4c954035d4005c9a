"""Shared pytest fixtures for ccab's Python tests.

Kafka:
- ``kafka_broker`` (session): bootstrap servers of one real broker for the whole test session.
  With ``CCAB_KAFKA_BROKERS`` set it is that cluster and nothing is started; otherwise a local
  broker is started (``ccab_workshop.kafka.broker.up``) in a temporary data dir on a free port pair, with
  ``CCAB_DATA_DIR`` / ``CCAB_KAFKA_PORT`` pointing at it until the session ends.
- ``fresh_topic`` (per test): a factory ``fresh_topic(prefix, partitions=3, config=None) -> name``
  creating a uniquely named topic on that broker (deleted after the test), for tests that want
  isolation from each other.
Tests that use ``kafka_broker`` (directly or through ``fresh_topic``) get the ``kafka`` marker
automatically, so ``pytest -m "not kafka"`` skips everything that needs Java.

Tiers (README, "Tests"): ``pytest_collection_modifyitems`` marks ``system`` every test that needs a
real outside process — Kafka (the ``kafka`` marker), a Go binary built or run (``collector_bin``,
``agent_bin``), Alertmanager (``alertmanager``, ``alertmanager_factory``) —, every end-to-end run on
the large canary world (``canary_world``) and every test in ``e2e/``, ``lab/`` and ``kafka/``. ``make test`` runs the rest (pure code and the chdb engine),
``make test-system`` the ``system`` tests, ``make test-slow`` the ``slow`` ones; a new test lands in
its tier by the fixtures it uses.

Warehouse and worlds, built once per test run (session scope) and copied or only read:
- ``warehouse_template``: a warehouse directory migrated once and closed; ``warehouse`` (per test)
  is a copy of it, opened (0.2-0.4 s to copy a closed chdb directory vs 11-12 s to migrate one, at load 15).
- ``tiny_world``: ``ccab sim tiny --hours 2`` generated once; tests only read its files.
- ``tiny_rolled_up_template``: a warehouse with ``tiny_world`` loaded and its hours rolled up, built
  once; ``tiny_warehouse`` (per test) is a copy of it, opened.
"Once per test run" is once for all pytest-xdist workers of the run (``once_per_run``: the first
worker builds, the others wait on a file lock).

Warehouse (docs: pipelines/ccab/warehouse_service/README.md, "Tests"):
- ``warehouse_service`` (session): one real warehouse service for the session; ``warehouse_env``
  (per test) points CCAB_CLICKHOUSE_URL at a fresh database on it, so CLI and pipeline tests take
  the deployment's client path (clickhouse-connect over HTTP) without an engine start each.
- ``local_warehouse`` (per test): a service of the test's own CCAB_DATA_DIR with
  CCAB_CLICKHOUSE_URL unset, started like ``ccab warehouse up``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Mapping

import pytest
from paths import REPO
from worlds import once_per_run, sim_world

pytest_plugins = ["alertmanager_fixture"]  # the real Alertmanager fixtures

# --- Kafka ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real Kafka broker shared by the whole session."""
    from ccab_workshop.kafka import broker
    from ccab.kafka import topics as kafka_topics

    external = os.environ.get("CCAB_KAFKA_BROKERS")
    if external:
        kafka_topics.ensure_topics(external)
        yield external
        return

    env = pytest.MonkeyPatch()
    env.setenv("CCAB_DATA_DIR", str(tmp_path_factory.mktemp("kafka-session")))
    env.setenv("CCAB_KAFKA_PORT", str(broker.find_free_port_pair()))
    quiet: Callable[[str], None] = lambda _message: None
    try:
        bootstrap = broker.up(timeout_s=120, progress=quiet)
        yield bootstrap
    finally:
        try:
            broker.down(progress=quiet)
        finally:
            env.undo()


@pytest.fixture
def fresh_topic(kafka_broker: str) -> Iterator[Callable[..., str]]:
    """Factory creating uniquely named topics on ``kafka_broker``; they are deleted afterwards."""
    from ccab.kafka.topics import TopicSpec, ensure_topics
    from confluent_kafka.admin import AdminClient

    created: list[str] = []

    def make(prefix: str = "test", partitions: int = 3, config: Mapping[str, str] | None = None) -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:12]}"
        ensure_topics(kafka_broker, {name: TopicSpec(partitions=partitions, config=dict(config or {}))})
        created.append(name)
        return name

    yield make
    if created:
        admin = AdminClient({"bootstrap.servers": kafka_broker})  # alive until the futures finish
        for future in admin.delete_topics(created, operation_timeout=30).values():
            future.exception(timeout=30)  # best effort: wait, ignore failures


#: a test using one of these needs a real outside process — or, ``canary_world``, is an end-to-end run
#: on the 150k-connection canary world (486 MB of records, a minute to generate): the ``system`` tier
#: (``airflow``: Airflow 3's own CLI, DAG runs through ``airflow dags test``, pipelines/tests/dags)
SYSTEM_FIXTURES = frozenset({"kafka_broker", "collector_bin", "agent_bin", "alertmanager", "alertmanager_factory",
                             "airflow", "canary_world"})
#: every test in these folders of pipelines/tests is in the ``system`` tier
SYSTEM_FOLDERS = frozenset({"e2e", "lab", "kafka"})
TESTS = Path(__file__).resolve().parent


#: system tests that change what the host's kernel offers (network namespaces and their sysctls,
#: the allowed congestion controls, BPF congestion controls registered kernel-wide) run one at a time
KERNEL_FIXTURES = frozenset({"namespaces", "agent_bin", "collector_bin"})
KERNEL_FOLDERS = frozenset({"e2e", "lab"})


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs a broker with ``kafka``, and every test of the system tier with
    ``system`` (by the fixtures it uses, its ``kafka`` marker or its folder).

    System and slow tests also get an ``xdist_group`` for ``--dist loadgroup`` (``make test-system``
    runs two workers): their file's (a file's tests share module fixtures and run in order on one
    worker), or ``kernel`` for every test that changes the host's kernel state, so those never
    overlap."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "kafka_broker" in fixtures:
            item.add_marker(pytest.mark.kafka)
        path = item.path.resolve().relative_to(TESTS)
        folder = path.parts[0]
        if fixtures & SYSTEM_FIXTURES or item.get_closest_marker("kafka") or folder in SYSTEM_FOLDERS:
            item.add_marker(pytest.mark.system)
        if item.get_closest_marker("system") or item.get_closest_marker("slow"):
            kernel = folder in KERNEL_FOLDERS or bool(fixtures & KERNEL_FIXTURES)
            item.add_marker(pytest.mark.xdist_group("kernel" if kernel else str(path)))


# --- Warehouse -----------------------------------------------------------------------------------
# chdb allows one data path per process at a time, so each test gets its own warehouse directory:
# a copy of one migrated while closed (the template), opened, and closed again at the end of the test.


@pytest.fixture(scope="session")
def warehouse_template(tmp_path_factory) -> Callable[[Path], Path]:
    """``warehouse_template(dest) -> dest``: a copy, at ``dest``, of a warehouse directory migrated
    once per test run and closed again (its store links are relative, so the copy is whole)."""
    from ccab.base import schema as migrate
    from ccab.base.warehouse import ChdbWarehouse

    def build(root: Path) -> None:
        wh = ChdbWarehouse(root / "warehouse")
        try:
            migrate.migrate(wh, log=lambda _m: None)
        finally:
            wh.close()

    return _copier(once_per_run(tmp_path_factory, "warehouse-template", build) / "warehouse")


def _copier(template: Path) -> Callable[[Path], Path]:
    """``copy_to(dest) -> dest``: a copy of the closed warehouse directory ``template`` at ``dest``
    (its store links are relative, so the copy is whole)."""

    def copy_to(dest: Path) -> Path:
        shutil.copytree(template, dest, symlinks=True)
        return dest

    return copy_to


def _opened_copy(tmp_path: Path, copy_to: Callable[[Path], Path]) -> Iterator:
    """An embedded warehouse opened on a copy made by ``copy_to``; closed afterwards."""
    from ccab.base.warehouse import ChdbWarehouse

    wh = ChdbWarehouse(copy_to(tmp_path / "warehouse"))
    try:
        yield wh
    finally:
        wh.close()


@pytest.fixture
def warehouse(tmp_path, warehouse_template):
    """A migrated embedded warehouse (real ClickHouse engine via chdb) in a fresh directory."""
    yield from _opened_copy(tmp_path, warehouse_template)


#: the hours of ``tiny_world`` (its window: [TINY_START, TINY_END))
TINY_START = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
TINY_END = datetime(2025, 11, 20, 14, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def tiny_rolled_up_template(tmp_path_factory, tiny_world, warehouse_template) -> Callable[[Path], Path]:
    """``tiny_rolled_up_template(dest) -> dest``: a copy of a warehouse directory in which
    ``tiny_world``'s tcp samples and requests were loaded by the real loader (no dead letters), its
    two hours rolled up by the hourly job (``run_window``) and the analyst views installed — built
    once per test run, so a test that starts from that state does not load and roll up again."""
    from ccab.base.warehouse import ChdbWarehouse
    from ccab.cohorts.job import run_window
    from ccab.cohorts.views import install_views
    from ccab.ingest.loader import load_files

    def build(root: Path) -> None:
        wh = ChdbWarehouse(warehouse_template(root / "warehouse"))
        try:
            report = load_files(wh, [tiny_world / "ccab.tcp.v1.jsonl", tiny_world / "ccab.http.v1.jsonl"])
            assert not report.dead, report.dead
            assert [h.skipped for h in run_window(wh, TINY_START, TINY_END).hours] == [False, False]
            install_views(wh)
        finally:
            wh.close()

    return _copier(once_per_run(tmp_path_factory, "tiny-rolled-up", build) / "warehouse")


@pytest.fixture
def tiny_warehouse(tmp_path, tiny_rolled_up_template):
    """An embedded warehouse holding ``tiny_world`` loaded and rolled up (``tiny_rolled_up_template``)."""
    yield from _opened_copy(tmp_path, tiny_rolled_up_template)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def warehouse_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real warehouse service (``python -m ccab.warehouse_service serve``: chdb behind
    ClickHouse's HTTP interface) for the whole session, in its own data dir on a free port; yields
    its base URL ``http://127.0.0.1:PORT``. Tests take a database each on it (``warehouse_env``),
    so they share one engine start and never see each other's tables."""
    import subprocess
    import sys
    import time
    import urllib.request

    data = tmp_path_factory.mktemp("warehouse-service")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "CCAB_CLICKHOUSE_URL"}
    env.update(CCAB_DATA_DIR=str(data), CCAB_WAREHOUSE_PORT=str(port))
    with open(data / "service.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ccab.warehouse_service", "serve", "--port", str(port)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(url + "/ping", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the warehouse service did not start: {(data / 'service.log').read_text()[-2000:]}")
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: engines whose tables are created before the objects that read them or write into them
_CLONE_ORDER = {"View": 2, "MaterializedView": 2, "Dictionary": 1}


def clone_database(base_url: str, template: str, dest: str) -> None:
    """Create database ``dest`` on the ClickHouse server at ``base_url`` as a copy of ``template``:
    every table, dictionary and view from its own ``CREATE`` statement (database names replaced;
    a view's install tag is its comment, part of that statement) and the rows of every table that has any (the
    migration ledger). ``open_warehouse`` then finds nothing to migrate or install."""
    from ccab.base.warehouse import ServerWarehouse, WarehouseError

    wh = ServerWarehouse(f"{base_url}/{template}")
    try:
        wh.command(f"CREATE DATABASE {dest}")
        objects = wh.query("SELECT name, engine, create_table_query, total_rows FROM system.tables "
                           "WHERE database = {db:String}", params={"db": template}).rows
        pending = sorted(objects, key=lambda o: _CLONE_ORDER.get(o[1], 0))
        while pending:  # views read views: retry what failed until a pass makes no progress
            failed: list = []
            for name, engine, ddl, rows in pending:
                try:
                    wh.command(ddl.replace(f"{template}.", f"{dest}."))
                except WarehouseError as exc:
                    failed.append((name, engine, ddl, rows, exc))
            if len(failed) == len(pending):
                raise failed[0][-1]
            pending = [f[:4] for f in failed]
        for name, engine, _ddl, rows in objects:
            if rows and engine.endswith("MergeTree"):
                wh.command(f"INSERT INTO {dest}.{name} SELECT * FROM {template}.{name}")
    finally:
        wh.close()


@pytest.fixture(scope="session")
def warehouse_service_template(warehouse_service: str) -> str:
    """A database of the session's warehouse service migrated once (views installed), which
    ``warehouse_env`` copies for each test: 4 s of migrations per test became one clone."""
    from ccab.pipeline import open_warehouse

    env = pytest.MonkeyPatch()
    env.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/t_template")
    try:
        with open_warehouse():
            pass
    finally:
        env.undo()
    return "t_template"


@pytest.fixture(scope="session")
def migrated_service_database(warehouse_service, warehouse_service_template) -> Callable[[], str]:
    """``new() -> url``: the URL of a new database of the session's warehouse service, a copy of
    the migrated template — for module-scoped fixtures (``warehouse_env`` is per test)."""

    def new() -> str:
        database = f"t_{uuid.uuid4().hex[:12]}"
        clone_database(warehouse_service, warehouse_service_template, database)
        return f"{warehouse_service}/{database}"

    return new


@pytest.fixture
def empty_warehouse_env(tmp_path, monkeypatch, warehouse_service):
    """Like ``warehouse_env``, but the database is new and empty: nothing migrated (tests of
    ``ccab db migrate`` itself)."""
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/t_{uuid.uuid4().hex[:12]}")
    return tmp_path / "data"


@pytest.fixture
def warehouse_env(tmp_path, monkeypatch, warehouse_service, warehouse_service_template):
    """CCAB_DATA_DIR pointing at a fresh directory and CCAB_CLICKHOUSE_URL at a fresh database of
    the session's warehouse service (a copy of the migrated template), for tests that go through
    the CLI (the same client path as a ClickHouse server and as the local service)."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    clone_database(warehouse_service, warehouse_service_template, database)
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/{database}")
    return tmp_path / "data"


@pytest.fixture
def local_warehouse(tmp_path, monkeypatch) -> Iterator[Path]:
    """A warehouse service of the test's own CCAB_DATA_DIR, started like ``ccab warehouse up``
    (CCAB_CLICKHOUSE_URL unset, CCAB_WAREHOUSE_PORT a free port): the deployment's path, for tests
    that run real services beside each other. Yields the data dir; stopped afterwards."""
    from ccab.warehouse_service import daemon

    data = tmp_path / "data"
    monkeypatch.setenv("CCAB_DATA_DIR", str(data))
    monkeypatch.setenv("CCAB_WAREHOUSE_PORT", str(_free_port()))
    monkeypatch.delenv("CCAB_CLICKHOUSE_URL", raising=False)
    daemon.up(timeout_s=120, progress=lambda _m: None)
    try:
        yield data
    finally:
        daemon.down(progress=lambda _m: None)


@pytest.fixture(scope="session")
def collector_bin(tmp_path_factory):
    """The collector, built from this tree once per test session."""
    import shutil
    import subprocess

    if not shutil.which("go"):
        pytest.skip("go is not installed: cannot build ccab-collector")
    out = tmp_path_factory.mktemp("bin") / "ccab-collector"
    subprocess.run(["go", "build", "-o", str(out), "./collectors/cmd/ccab-collector"],
                   cwd=REPO, check=True, env=dict(os.environ, CGO_ENABLED="0"))
    return out


# --- Worlds --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    """``ccab sim tiny --hours 2`` (2025-11-20 12:00-14:00 UTC, PoP tst1, rollout tst1-tiny), generated
    once per test run; read its files, write nothing into it."""
    return sim_world(tmp_path_factory, "tiny", "--hours", "2")


@pytest.fixture(scope="session")
def canary_world(tmp_path_factory) -> Path:
    """``ccab sim canary-tyo1 --hours 3 --connections 150000`` (2025-11-20 00:00-03:00 UTC, PoP tyo1,
    rollout tyo1-bbr-canary; the Dropbox/Verizon patterns planted, truth.json beside the records),
    generated once per test run; read its files, write nothing into it."""
    return sim_world(tmp_path_factory, "canary-tyo1", "--hours", "3", "--connections", "150000")


# --- Summaries -----------------------------------------------------------------------------------


_SUMMARIES = pytest.StashKey[list]()


@pytest.fixture
def summary_line(request) -> Callable[[str], None]:
    """``summary_line(text)``: print ``text`` at the end of the pytest run, whatever the capture
    mode (the adversarial suite's tried/loaded/dead-lettered/lost line in `make test`)."""
    lines = request.config.stash.setdefault(_SUMMARIES, [])
    return lines.append


def pytest_sessionfinish(session) -> None:
    """Under pytest-xdist (``make test`` runs ``-n``), a worker hands its summary lines to the
    controller, which prints them (``pytest_testnodedown`` below)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["ccab_summary_lines"] = list(session.config.stash.get(_SUMMARIES, []))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    lines = getattr(node, "workeroutput", {}).get("ccab_summary_lines", [])
    node.config.stash.setdefault(_SUMMARIES, []).extend(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    for line in config.stash.get(_SUMMARIES, []):
        terminalreporter.write_line(line)
