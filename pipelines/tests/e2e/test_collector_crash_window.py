"""What a SIGKILL of ccab-collector loses: the crash window, measured (docs/collector/sink.md,
"What a crash of the collector loses").

The real ``ccab-collector`` captures the close of real loopback TCP connections (sock_diag destroy
events, tcp_conn/1) and produces them to a real Kafka broker. A generator opens and closes
connections at a steady rate; connection ``j`` carries ``j + 1`` bytes from client to server, so
its record's ``bytes_received`` (those and the FIN) names it. The collector is SIGKILLed several times mid-stream and
restarted each time; its /metrics are scraped just before each kill. Then every record is read
back from Kafka, and for each kill

    lost = connections closed while that process captured (from its /metrics answering to the
           kill) whose record is not in Kafka.

The collector runs with a small window (``--kafka-max-inflight 100``, ``--queue-max-records 1000``)
and a long linger (300 ms) so that the Kafka client fills to its bound and the sink spools beyond
it: the bound is reached, not only stated. Each kill must lose at most

    queue.max_records + kafka.max_inflight_records
        + the destroy events not yet read from the kernel (those of the last close-capture
          coalesce interval before the kill: counted from the generator's log, two intervals)

and at most what its last scrape showed in memory (queue + inflight gauges) plus what closed
since (and in the coalesce interval before it). A spooled record must survive the kill. The test
is not vacuous: it checks that some scrape showed records in flight at the bound's order, that
the sink spooled for backpressure, that some kill lost records, and that the final, cleanly
stopped process lost none (so the counting itself is right). It prints::

    crash window: kills 5, lost max N (bound B), median M
"""

from __future__ import annotations

import random
import signal
import socket
import statistics
import threading
import time

import pytest
from test_collector_e2e import Collector, consume_all, metric_sum

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KILLS = 5
RATE_PER_S = 500  # connections closed per second
QUEUE_MAX, INFLIGHT_MAX = 1000, 100
LINGER_S = 0.3
COALESCE_S = 0.05  # the collector's default close_capture.coalesce


class Connections(threading.Thread):
    """Opens, uses and closes loopback connections at RATE_PER_S; connection j sends j + 1 bytes.
    ``closed`` lists (j, time.monotonic() after the server's close) in order."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1024)
        self.port = self.listener.getsockname()[1]
        self.closed: list[tuple[int, float]] = []
        self.running = threading.Event()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _run(self) -> None:
        j = 0
        while not self.stop_event.is_set():
            if not self.running.is_set():
                time.sleep(0.01)
                continue
            t0, done = time.monotonic(), 0
            while self.running.is_set() and not self.stop_event.is_set():
                ahead = t0 + done / RATE_PER_S - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                with socket.create_connection(("127.0.0.1", self.port)) as c:
                    c.sendall(b"x" * (j + 1))
                s, _ = self.listener.accept()
                while s.recv(1 << 16):
                    pass
                s.close()
                self.closed.append((j, time.monotonic()))
                j += 1
                done += 1

    def between(self, t0: float, t1: float) -> set[int]:
        return {j for j, t in self.closed if t0 <= t < t1}

    def finish(self) -> None:
        self.stop_event.set()
        self.join(10)
        self.listener.close()


def test_sigkill_loses_at_most_the_in_memory_window(collector_bin, kafka_broker, fresh_topic, tmp_path, summary_line):
    conn_topic = fresh_topic("crash-conn", partitions=1)
    gen = Connections()
    col = Collector(collector_bin, [
        "--kafka-brokers", kafka_broker, "--topic-conn", conn_topic,
        "--topic-tcp", fresh_topic("crash-tcp", partitions=1), "--topic-http", fresh_topic("crash-http", partitions=1),
        "--state-dir", str(tmp_path / "state"), "--pop", "lab1", "--host", "edge-crash", "--nginx-enabled=false",
        "--tcp-info-enabled", "--tcp-info-interval", "1s", "--tcp-info-local-ports", str(gen.port),
        "--tcp-info-salt", "crash", "--kafka-linger", f"{int(LINGER_S * 1000)}ms",
        "--kafka-max-inflight", str(INFLIGHT_MAX), "--queue-max-records", str(QUEUE_MAX),
        "--kafka-shutdown-timeout", "5s", "--recovery-lookback", "10s",
    ], tmp_path / "collector.log")
    rng = random.Random(29)
    runs = []  # per process: t_up, t_end, last scrape (t, metrics) before the end, killed
    try:
        gen.start()
        for k in range(KILLS + 1):
            col.start()
            t_up = time.monotonic()
            gen.running.set()
            if k == KILLS:  # the last process stops cleanly: it must lose nothing
                time.sleep(3)
                gen.running.clear()
                time.sleep(0.5)  # the generator's last connection is closed
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    m = col.metrics()
                    if m.get("ccab_collector_inflight_records") == 0 and m.get("ccab_collector_queue_records") == 0 \
                            and m.get("ccab_collector_spool_mode") == 0:
                        break
                    time.sleep(0.2)
                t_end = time.monotonic()
                m_end = col.metrics()
                assert col.stop(signal.SIGTERM) == 0, col.tail()
                runs.append((t_up, t_end, (t_end, m_end), False))
                break
            run_until = time.monotonic() + rng.uniform(2.5, 4.0)
            while True:  # scrape, then kill after a random part of a scrape interval
                t_scrape = time.monotonic()
                m = col.metrics()
                time.sleep(rng.uniform(0.0, 0.25))
                if time.monotonic() >= run_until:
                    break
            t_kill = time.monotonic()
            col.stop(signal.SIGKILL)
            runs.append((t_up, t_kill, (t_scrape, m), True))
            time.sleep(0.3)
        assert gen.error is None, gen.error
        records = consume_all(kafka_broker, conn_topic)
    finally:
        gen.finish()
        col.kill_quietly()

    closed_total = len(gen.closed)
    seen: dict[int, int] = {}
    for _key, rec in records:
        j = rec["bytes_received"] - 2  # the server received j + 1 bytes and the FIN
        assert 0 <= j < closed_total, f"a tcp_conn/1 record names no connection of the test: {rec}"
        seen[j] = seen.get(j, 0) + 1
    duplicates = sum(n - 1 for n in seen.values())

    lines = []
    lost_per_kill, bounds = [], []
    inflight_seen, spooled_backpressure = [], 0.0
    for i, (t_up, t_end, (t_scrape, m), killed) in enumerate(runs):
        during = gen.between(t_up, t_end)
        lost = len(during - seen.keys())
        queue, inflight = m.get("ccab_collector_queue_records", 0), m.get("ccab_collector_inflight_records", 0)
        assert metric_sum(m, "ccab_collector_records_dropped_total") == 0, \
            f"process {i}: records dropped (counted): {[(k, v) for k, v in m.items() if 'dropped' in k and v]}"
        spooled_backpressure = max(spooled_backpressure,
                                   m.get('ccab_collector_spool_entries_total{reason="backpressure"}', 0))
        if not killed:
            assert lost == 0, f"the cleanly stopped process lost {lost} of {len(during)} connections"
            continue
        unread = len(gen.between(t_end - 2 * COALESCE_S, t_end))
        bound = QUEUE_MAX + INFLIGHT_MAX + unread
        since_scrape = len(gen.between(t_scrape - 2 * COALESCE_S, t_end))
        produced = metric_sum(m, "ccab_collector_records_produced_total")
        spooled = metric_sum(m, "ccab_collector_records_spooled_total")
        lines.append(f"kill {i + 1}: closed {len(during)}, in Kafka {len(during & seen.keys())}, lost {lost}; last scrape "
                     f"{(t_end - t_scrape) * 1000:.0f} ms before: produced {produced:.0f}, spooled {spooled:.0f}, "
                     f"queue {queue:.0f}, inflight {inflight:.0f}; closed since {since_scrape}; bound {bound}")
        lost_per_kill.append(lost)
        bounds.append(bound)
        inflight_seen.append(inflight)
        assert lost <= bound, lines[-1]
        assert lost <= queue + inflight + since_scrape, lines[-1]
    print("\n" + "\n".join(lines))
    print(f"{closed_total} connections, {len(seen)} in Kafka, {duplicates} duplicate records")
    summary = (f"crash window: kills {len(lost_per_kill)}, lost max {max(lost_per_kill)} (bound {max(bounds)}), "
               f"median {statistics.median(lost_per_kill):g}")
    print(summary)
    summary_line(summary)  # at the end of the tier's output, beside the adversarial suite's line
    # not vacuous: the window was full at some kill, the sink spooled beyond it, and kills lost records
    assert max(inflight_seen) >= INFLIGHT_MAX // 2, f"no scrape saw the Kafka client near its bound: {inflight_seen}"
    assert spooled_backpressure > 0, "the sink never spooled for backpressure: the bound was not reached"
    assert max(lost_per_kill) > 0, "no kill lost a record: nothing was measured"
    # seen after the fact: each kill is counted by the next start, and logged with the bound
    m_end = runs[-1][2][1]
    assert m_end.get("ccab_collector_unclean_stops_total") == KILLS, m_end.get("ccab_collector_unclean_stops_total")
    log = (tmp_path / "collector.log").read_text()
    warnings = [line for line in log.splitlines() if "previous collector process died without shutting down" in line]
    assert len(warnings) == KILLS and all(f"lost_records_at_most={QUEUE_MAX + INFLIGHT_MAX}" in w for w in warnings)
