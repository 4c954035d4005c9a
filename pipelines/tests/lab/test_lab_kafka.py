"""What `ccab lab run` and scripts/live-canary.sh start for themselves they stop (issue 29): a
run in its own data dir whose Kafka port another data dir's broker holds picks a free port instead
of failing with "port ... already in use", and its broker is stopped when the run's session
closes, so the next run (or `make demo`) finds the port free. A broker that was already running is
reused and left running. Real brokers, no root needed (runner._kafka is the lab's only way to Kafka)."""

from __future__ import annotations

import os
import socket
from contextlib import ExitStack
from types import SimpleNamespace

from ccab_workshop.kafka import broker
from ccab_workshop.lab.runner import _kafka


def _answers(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_a_run_starts_its_own_broker_on_a_free_port_and_stops_it(tmp_path, monkeypatch, kafka_broker):
    # the session broker of another data dir holds the port this data dir is configured for
    taken = int(kafka_broker.rsplit(":", 1)[1])
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "run1"))
    monkeypatch.setenv("CCAB_KAFKA_PORT", str(taken))
    monkeypatch.delenv("CCAB_KAFKA_BROKERS", raising=False)
    said: list[str] = []
    session = SimpleNamespace(stack=ExitStack())
    bootstrap = _kafka(said.append, session)
    try:
        assert bootstrap != f"127.0.0.1:{taken}" and _answers(bootstrap), bootstrap
        assert any("stopped at the end" in m for m in said)
        pid = broker.broker_pid(broker.paths())
        assert pid is not None
    finally:
        session.stack.close()
    assert not broker.is_running() and broker.broker_pid(broker.paths()) is None
    assert not _answers(bootstrap)
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive
    assert _answers(kafka_broker)  # the other data dir's broker was not touched


def test_a_running_broker_is_reused_and_left_running(tmp_path, monkeypatch, kafka_broker):
    # the session fixture's own data dir: its broker runs
    session = SimpleNamespace(stack=ExitStack())
    bootstrap = _kafka(lambda _m: None, session)
    session.stack.close()
    assert bootstrap == kafka_broker
    assert _answers(kafka_broker)
