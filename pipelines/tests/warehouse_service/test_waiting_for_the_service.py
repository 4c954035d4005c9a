"""Processes that find the local warehouse service down (issue 28's soak: it is SIGKILLed and
restarted under them): an analyst's command waits ``CCAB_WAREHOUSE_WAIT_S`` for it and then
answers (it used to exit 1 at once: 6 of 51 analyst commands in the soak); the loader, a service,
waits until the warehouse answers, saying so in its log and in ``ccab_loader_warehouse_ready``
(it used to exit at start). Real processes, a real warehouse service started after them, a real
broker for the loader."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from alertmanager_fixture import wait_until
from paths import REPO

CCAB = [sys.executable, "-m", "ccab.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def down_service(tmp_path, monkeypatch):
    """The environment of a local warehouse service that is not running yet; ``start()`` starts
    it (like ``ccab warehouse up``); stopped at the end."""
    from ccab.warehouse_service import daemon

    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_WAREHOUSE_PORT", str(_free_port()))
    monkeypatch.delenv("CCAB_CLICKHOUSE_URL", raising=False)
    started = []

    def start():
        daemon.up(timeout_s=300, progress=lambda _m: None)
        started.append(1)

    yield start
    if started:
        daemon.down(progress=lambda _m: None)


def test_a_command_started_while_the_service_is_down_waits_for_it_and_answers(down_service):
    env = dict(os.environ, CCAB_WAREHOUSE_WAIT_S="600")
    p = subprocess.Popen([*CCAB, "query", "SELECT 40 + 2"], env=env, cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = p.stderr.readline()  # was: the error, and exit 1
        assert "waiting for the local warehouse service" in first and "up to 600 s" in first, first
        down_service()
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (first, out, err)
    assert out.strip().splitlines()[-1].strip() == "42"


def test_a_command_that_waited_in_vain_says_so_in_its_last_line(down_service):
    env = dict(os.environ, CCAB_WAREHOUSE_WAIT_S="2")
    p = subprocess.run([*CCAB, "query", "SELECT 1"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert "the local warehouse is not running" in last and "(CCAB_WAREHOUSE_WAIT_S)" in last, p.stderr


@pytest.mark.kafka
def test_the_loader_waits_for_the_warehouse_service_at_start(down_service, kafka_broker):
    port = _free_port()
    env = dict(os.environ, CCAB_KAFKA_BROKERS=kafka_broker)
    loader = subprocess.Popen([*CCAB, "loader", "--metrics-port", str(port), "--group", f"wait-{port}"],
                              env=env, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def metric() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return next((line for line in r.read().decode().splitlines()
                             if line.startswith("ccab_loader_warehouse_ready ")), "")
        except OSError:
            return ""

    try:
        waiting = ""
        while "waiting for the local warehouse service" not in waiting:  # was: exit 1 at once
            waiting = loader.stderr.readline()
            assert waiting or loader.poll() is None, f"the loader exited {loader.poll()}"
        assert "until it answers" in waiting, waiting
        assert metric() == "ccab_loader_warehouse_ready 0.0"
        down_service()
        wait_until(lambda: metric() == "ccab_loader_warehouse_ready 1.0", what="the loader reached the warehouse",
                   timeout_s=300, interval_s=0.5)
        line = ""
        while " loading " not in line:  # its consumer runs (SIGTERM from here on stops it cleanly)
            line = loader.stderr.readline()
            assert line or loader.poll() is None, f"the loader exited {loader.poll()}"
    finally:
        loader.send_signal(signal.SIGTERM)
        try:
            loader.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            loader.kill()
            loader.communicate()
    assert loader.returncode == 0


def test_a_read_cut_off_by_a_killed_service_runs_again_when_the_service_is_back(down_service, capfd):
    """The soak's analysts (issue 28): a `ccab report` whose statement was running when the service
    was SIGKILLed failed with 'it stopped answering' — only opening a connection waited. A read is
    safe to run again: it waits CCAB_WAREHOUSE_WAIT_S for the restarted service and answers."""
    import threading
    import time

    from ccab.base.warehouse import connect
    from ccab.warehouse_service import daemon

    down_service()
    wh = connect(wait_s=300)
    killed = daemon.service_pid()
    watcher = connect(wait_s=300)

    def kill_mid_statement_then_restart():
        for _ in range(600):  # until the read is running in the service
            if watcher.query("SELECT count() FROM system.processes WHERE query LIKE '%sleepEachRow(0.5)%' "
                             "AND query NOT LIKE '%system.processes%'").scalar():
                break
            time.sleep(0.05)
        os.kill(killed, signal.SIGKILL)
        time.sleep(1)
        down_service()  # restarted, as systemd (Restart=always) or the soak's supervisor does

    t = threading.Thread(target=kill_mid_statement_then_restart)
    t.start()
    try:
        rows = wh.query("SELECT count() FROM numbers(6) WHERE sleepEachRow(0.5) = 0",
                        settings={"function_sleep_max_microseconds_per_block": 10_000_000}).rows
    finally:
        t.join()
    assert rows == [(6,)]
    assert daemon.service_pid() not in (None, killed)  # it answered from the restarted service
    assert "stopped answering during a read; waiting up to 300 s" in capfd.readouterr().err
