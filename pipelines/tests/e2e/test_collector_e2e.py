"""ccab-collector end to end, with real components only.

- ``test_nginx_to_warehouse_through_rotations_and_restarts``: a real nginx in a network
  namespace (veth to a client namespace, ``tbf`` bottleneck on the server side) serves files to
  curl; the collector tails nginx's access log into a real Kafka broker; the real loader puts the
  records into the (embedded) warehouse. Mid-run the log is rotated both ways (rename +
  ``nginx -s reopen``, and copytruncate) and the collector is stopped with SIGTERM and with
  SIGKILL. The warehouse must hold exactly the requests nginx logged: none lost, none twice.
- ``test_kafka_outage_spools_and_replays_exactly_once``: a dedicated broker is stopped for 60 s
  while lines keep arriving; every line ends up in Kafka exactly once, and the collector's
  metrics show that records were spooled and replayed.

Both need root (namespaces, nginx), ``ip``, ``tc``, ``nginx``, ``curl`` and Go; they are skipped
with the reason when something is missing. ``make setup`` installs the Debian packages.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from ccab_workshop.lab.edge import free_port, nginx_config


pytestmark = pytest.mark.kafka

# --- helpers ---------------------------------------------------------------------------------------


def metrics_of(port: int) -> dict[str, float]:
    """The collector's /metrics as {"name{labels}": value}."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def metric_sum(m: dict[str, float], name: str) -> float:
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


class Collector:
    """One ccab-collector run process; restartable with the same arguments and state."""

    def __init__(self, binary: Path, args: list[str], log: Path):
        self.metrics_port = free_port()
        self.cmd = [str(binary), "run", "--metrics-addr", f"127.0.0.1:{self.metrics_port}", *args]
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                metrics_of(self.metrics_port)
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"collector exited {self.proc.returncode}: {self.tail()}")
                time.sleep(0.1)
        raise AssertionError(f"collector /metrics did not answer: {self.tail()}")

    def metrics(self) -> dict[str, float]:
        return metrics_of(self.metrics_port)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.proc = None
        return code

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""

    def kill_quietly(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_until(what: str, cond, timeout: float = 60, every: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def consume_all(bootstrap: str, topic: str, timeout_s: float = 120.0) -> list[tuple[bytes, dict]]:
    """Every record of topic: (key, value as JSON). Reads each partition from its start up to its
    high watermark with manual assignment: no consumer group to join (a group join after a broker
    restart can take longer than any idle timeout) and no guessing when the topic is "done"."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{random.random()}",
                  "enable.auto.commit": False})
    out = []
    try:
        partitions = c.list_topics(topic, timeout=30).topics[topic].partitions
        high = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        todo = {p for p, h in high.items() if h > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.key(), json.loads(msg.value())))
            if msg.offset() + 1 >= high[msg.partition()]:
                todo.discard(msg.partition())
        assert not todo, f"partitions {sorted(todo)} of {topic} not read to their end in {timeout_s} s"
    finally:
        c.close()
    return out


# --- network lab: two namespaces, veth, tbf, nginx ------------------------------------------------


def _need_lab() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, nginx)")
    for tool in ("ip", "tc", "nginx", "curl"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (make setup installs nginx-light, iproute2, curl)")


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


class Lab:
    """Server and client namespaces joined by a veth pair, with a 30 Mbit tbf on the server side."""

    def __init__(self, root: Path):
        self.id = f"{os.getpid() % 10000}{random.randint(10, 99)}"
        self.srv, self.cli = f"ccab-s{self.id}", f"ccab-c{self.id}"
        self.net = random.randint(20, 250)
        self.srv_ip, self.cli_ip = f"10.198.{self.net}.1", f"10.198.{self.net}.2"
        self.root = root
        self.nginx_conf = root / "nginx" / "nginx.conf"
        self.logs = root / "logs"
        self.www = root / "www"

    def up(self) -> None:
        vs, vc = f"vs{self.id}", f"vc{self.id}"
        _sh("ip", "netns", "add", self.srv)
        _sh("ip", "netns", "add", self.cli)
        _sh("ip", "link", "add", vs, "type", "veth", "peer", "name", vc)
        _sh("ip", "link", "set", vs, "netns", self.srv)
        _sh("ip", "link", "set", vc, "netns", self.cli)
        for ns, dev, ip in ((self.srv, vs, self.srv_ip), (self.cli, vc, self.cli_ip)):
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        _sh("ip", "netns", "exec", self.srv, "tc", "qdisc", "add", "dev", vs, "root",
            "tbf", "rate", "30mbit", "burst", "16k", "limit", "30000")

    def start_nginx(self) -> None:
        (self.root / "nginx").mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.www.mkdir(parents=True, exist_ok=True)
        (self.www / "small").write_bytes(os.urandom(1024))
        (self.www / "medium").write_bytes(os.urandom(200 * 1024))
        (self.www / "big").write_bytes(os.urandom(2 * 1024 * 1024))
        tmp = self.root / "nginx"
        self.nginx_conf.write_text(nginx_config(tmp, self.logs / "access.log", f"{self.srv_ip}:8080", self.www,
                                                workers=2, worker_connections=256))
        _sh("ip", "netns", "exec", self.srv, "nginx", "-p", str(tmp), "-c", str(self.nginx_conf))

    def reopen_nginx(self) -> None:
        _sh("ip", "netns", "exec", self.srv, "nginx", "-p", str(self.root / "nginx"), "-c", str(self.nginx_conf),
            "-s", "reopen")

    def get(self, paths: list[str]) -> list[int]:
        """GET each path from the client namespace in one curl (keep-alive): status codes."""
        urls = [f"http://{self.srv_ip}:8080/{p}" for p in paths]
        cmd = ["ip", "netns", "exec", self.cli, "curl", "-s", "--max-time", "20"]
        for u in urls:
            cmd += ["-o", "/dev/null", "-w", "%{http_code}\\n", u]
        res = subprocess.run(cmd, capture_output=True, text=True)
        return [int(x) for x in res.stdout.split()]

    def down(self) -> None:
        pid_file = self.root / "nginx" / "nginx.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGQUIT)
            except (ProcessLookupError, ValueError):
                pass
            time.sleep(0.5)
        for ns in (self.srv, self.cli):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def lab(tmp_path):
    _need_lab()
    lab = Lab(tmp_path / "lab")
    try:
        lab.up()
        lab.start_nginx()
        yield lab
    finally:
        lab.down()


class Traffic(threading.Thread):
    """Requests from the client namespace until stopped; pausable."""

    def __init__(self, lab: Lab):
        super().__init__(daemon=True)
        self.lab = lab
        self.ok = 0
        self.failed = 0
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.idle = threading.Event()
        self.rng = random.Random(7)

    def run(self) -> None:
        while not self.stop_event.is_set():
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.05)
                continue
            self.idle.clear()
            paths = [self.rng.choice(["small"] * 12 + ["medium"] * 3 + ["big"]) for _ in range(8)]
            codes = self.lab.get(paths)
            self.ok += sum(1 for c in codes if c == 200)
            self.failed += len(paths) - sum(1 for c in codes if c == 200)
        self.idle.set()

    def pause(self) -> None:
        self.idle.clear()
        self.paused.set()
        self.idle.wait(30)

    def resume(self) -> None:
        self.paused.clear()

    def finish(self) -> None:
        self.stop_event.set()
        self.join(60)


def log_keys(paths: list[Path]) -> list[tuple[int, int]]:
    keys = []
    for p in paths:
        for line in p.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                keys.append((rec["connection"], rec["connection_requests"]))
    return keys


# --- (a) nginx → collector → Kafka → loader → warehouse --------------------------------------------


def test_nginx_to_warehouse_through_rotations_and_restarts(collector_bin, lab, kafka_broker, fresh_topic,
                                                           warehouse, tmp_path):
    from ccab.base.contracts import SCHEMAS
    from ccab.ingest.loader import Loader

    http_topic = fresh_topic("col-http", partitions=3)
    tcp_topic = fresh_topic("col-tcp", partitions=1)
    rollout = tmp_path / "rollout.json"
    rollout.write_text(json.dumps({"rollout_id": "r-e2e", "arm": "bbr", "cc": "bbr", "generation": 3}))
    access = lab.logs / "access.log"
    col = Collector(collector_bin, [
        "--kafka-brokers", kafka_broker, "--topic-http", http_topic, "--topic-tcp", tcp_topic,
        "--state-dir", str(tmp_path / "state"), "--nginx-paths", str(access), "--nginx-format", "json",
        "--nginx-checkpoint-interval", "3s", "--nginx-rotate-grace", "2s", "--pop", "lab1", "--host", "edge-e2e",
        "--rollout-state-file", str(rollout), "--kafka-shutdown-timeout", "5s", "--recovery-lookback", "10s",
    ], tmp_path / "collector.log")
    traffic = Traffic(lab)
    try:
        col.start()
        traffic.start()
        wait_until("first lines read", lambda: metric_sum(col.metrics(), "ccab_collector_log_lines_read_total") > 20)

        # 1. rename rotation while requests keep coming
        access.rename(lab.logs / "access.log.1")
        lab.reopen_nginx()
        wait_until("rename rotation seen",
                   lambda: col.metrics().get('ccab_collector_log_rotations_total{kind="rename"}', 0) >= 1)
        time.sleep(1.5)

        # 2. graceful restart under traffic
        assert col.stop(signal.SIGTERM) == 0, col.tail()
        time.sleep(0.5)
        col.start()
        time.sleep(1.5)

        # 3. copytruncate (in a pause: lines written between the copy and the truncation are
        #    lost by any tailer; that window is inherent to copytruncate)
        traffic.pause()
        time.sleep(1.5)  # nginx wrote its last lines; the collector (250 ms polls) read them
        shutil.copyfile(access, lab.logs / "access.log.2")
        os.truncate(access, 0)
        traffic.resume()
        wait_until("truncation seen",
                   lambda: col.metrics().get('ccab_collector_log_rotations_total{kind="truncate"}', 0) >= 1)
        time.sleep(1.5)

        # 4. SIGKILL under traffic: the restart reads back what reached Kafka and skips it
        col.stop(signal.SIGKILL)
        time.sleep(0.3)
        col.start()
        wait_until("read-back after SIGKILL", lambda: col.metrics().get("ccab_collector_recovery_done", 0) == 1)
        time.sleep(2.0)
        traffic.finish()
        time.sleep(1.0)  # nginx writes the last lines

        logged = log_keys([lab.logs / "access.log.1", lab.logs / "access.log.2", access])
        n = len(logged)
        wait_until("everything read delivered", lambda: (lambda m: m.get("ccab_collector_inflight_records") == 0
                   and m.get("ccab_collector_spool_mode") == 0
                   and m.get("ccab_collector_checkpoint_lag_bytes") == 0)(col.metrics()), timeout=60)
        time.sleep(1.0)
        m = col.metrics()
        assert col.stop(signal.SIGTERM) == 0, col.tail()
    finally:
        traffic.stop_event.set()
        col.kill_quietly()

    print(f"\nnginx logged {n} requests; after the SIGKILL restart: "
          f"{metric_sum(m, 'ccab_collector_records_duplicate_total'):.0f} re-read lines skipped as already in Kafka, "
          f"{metric_sum(m, 'ccab_collector_recovery_records_scanned_total'):.0f} records read back")
    assert traffic.failed == 0
    assert n == traffic.ok, f"nginx logged {n} requests, the client saw {traffic.ok} succeed"
    assert len(set(logged)) == n, "nginx logged a (connection, connection_requests) twice"
    assert m.get("ccab_collector_recovery_done") == 1

    loader = Loader(warehouse, kafka_broker, {http_topic: SCHEMAS["http_request/1"]}, group=f"g-{http_topic}",
                    batch_wait_s=0.2)
    totals = loader.run(max_idle_s=4)
    assert totals.dead_total == 0
    rows = warehouse.query(
        f"SELECT conn_serial, conn_requests, peer_prefix, pop, host, arm, rollout_id, kernel, cc "
        f"FROM http_requests WHERE _topic = '{http_topic}'").rows
    got = [(r[0], r[1]) for r in rows]
    missing = set(logged) - set(got)
    dupes = len(got) - len(set(got))
    assert not missing and dupes == 0, f"{len(missing)} lines lost, {dupes} delivered twice (of {n})"
    assert len(got) == n
    assert {r[2] for r in rows} == {f"10.198.{lab.net}.0/24"}, "a raw client IP left the host"
    assert {(r[3], r[4], r[5], r[6]) for r in rows} == {("lab1", "edge-e2e", "bbr", "r-e2e")}
    assert all(r[7] for r in rows) and all(r[8] for r in rows)


# --- (b) a 60 s broker outage -----------------------------------------------------------------------


class LineWriter(threading.Thread):
    """Appends ccab-format JSON lines (unique connection ids) at a steady rate."""

    def __init__(self, path: Path, per_s: int = 200):
        super().__init__(daemon=True)
        self.path, self.per_s = path, per_s
        self.n = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        with open(self.path, "a", buffering=1) as f:
            while not self.stop_event.is_set():
                burst = self.per_s // 10
                now = time.time()
                for _ in range(burst):
                    f.write(json.dumps({
                        "msec": round(now, 3), "remote_addr": "192.0.2.10", "connection": self.n,
                        "connection_requests": 1, "request_method": "GET", "status": 200, "bytes_sent": 1200,
                        "body_bytes_sent": 1000, "request_time": 0.004, "tcpinfo_rtt": "900",
                        "tcpinfo_rttvar": "300", "tcpinfo_snd_cwnd": "10", "tcpinfo_rcv_space": "14600"}) + "\n")
                    self.n += 1
                time.sleep(0.1)

    def finish(self) -> int:
        self.stop_event.set()
        self.join(10)
        return self.n


@pytest.mark.slow
def test_kafka_outage_spools_and_replays_exactly_once(collector_bin, tmp_path, monkeypatch):
    from ccab_workshop.kafka import broker
    from ccab.kafka import topics as kafka_topics

    if not shutil.which("java"):
        pytest.skip("java is not installed: cannot run a dedicated Kafka broker")
    monkeypatch.delenv("CCAB_KAFKA_BROKERS", raising=False)
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "kafka-outage"))
    monkeypatch.setenv("CCAB_KAFKA_PORT", str(broker.find_free_port_pair()))
    quiet = lambda _m: None  # noqa: E731
    bootstrap = broker.up(timeout_s=120, progress=quiet)
    log = tmp_path / "access.log"
    log.touch()
    col = Collector(collector_bin, [
        "--kafka-brokers", bootstrap, "--state-dir", str(tmp_path / "state"), "--nginx-paths", str(log),
        "--nginx-format", "json", "--nginx-checkpoint-interval", "1s", "--host", "edge-outage", "--pop", "lab1",
        "--rollout-state-file", str(tmp_path / "none.json"), "--kafka-max-inflight", "300",
        "--kafka-stall-timeout", "2s", "--kafka-retry-backoff", "1s", "--kafka-shutdown-timeout", "5s",
    ], tmp_path / "collector.log")
    writer = LineWriter(log)
    try:
        col.start()
        writer.start()
        time.sleep(5)
        broker.down(progress=quiet)
        wait_until("the collector noticed", lambda: col.metrics().get("ccab_collector_spool_mode") == 1, timeout=30)
        time.sleep(60)
        during = col.metrics()
        broker.up(timeout_s=120, progress=quiet)
        time.sleep(10)
        n = writer.finish()
        wait_until("the spool drained", lambda: (lambda m: m.get("ccab_collector_spool_mode") == 0
                                                 and m.get("ccab_collector_inflight_records") == 0
                                                 and m.get("ccab_collector_queue_records") == 0)(col.metrics()),
                   timeout=120)
        time.sleep(2)
        m = col.metrics()
        assert col.stop(signal.SIGTERM) == 0, col.tail()
        recs = consume_all(bootstrap, kafka_topics.TOPIC_HTTP)
    finally:
        writer.stop_event.set()
        col.kill_quietly()
        broker.down(progress=quiet)

    conns = [r["conn_serial"] for _, r in recs]
    assert len(conns) == n and set(conns) == set(range(n)), \
        f"{n} lines written, {len(conns)} records in Kafka, {len(set(conns))} distinct"
    assert {k for k, _ in recs} == {b"edge-outage"}
    spooled = metric_sum(m, "ccab_collector_records_spooled_total")
    replayed = metric_sum(m, "ccab_collector_records_replayed_total")
    produced = metric_sum(m, "ccab_collector_records_produced_total")
    assert spooled > 1000 and replayed == spooled, (spooled, replayed)
    assert produced + replayed == n
    assert during.get("ccab_collector_kafka_up") == 0
    assert metric_sum(m, "ccab_collector_records_dropped_total") == 0


# --- (c) close-time capture: every connection once, through Kafka into the hourly job ---------------


def test_close_capture_every_connection_once_into_the_hourly_job(collector_bin, lab, kafka_broker, fresh_topic,
                                                                warehouse, tmp_path):
    """Real nginx in a namespace, 60 short connections of mixed sizes (one curl each), the
    collector polling every 10 s (so it sees almost none of them) with close capture on: each
    connection arrives once as tcp_conn/1 with its final bytes, the loader stores it, and the
    hourly job counts every one of them once, from its close record."""
    from datetime import datetime, timedelta, timezone

    from ccab.base.contracts import SCHEMAS
    from ccab.cohorts.job import run_window
    from ccab.ingest.loader import Loader

    conn_topic = fresh_topic("col-conn", partitions=1)
    tcp_topic = fresh_topic("col-tcp2", partitions=1)
    http_topic = fresh_topic("col-http2", partitions=1)
    col = Collector(collector_bin, [
        "--kafka-brokers", kafka_broker, "--topic-http", http_topic, "--topic-tcp", tcp_topic,
        "--topic-conn", conn_topic, "--state-dir", str(tmp_path / "state"), "--pop", "lab1", "--host", "edge-cc",
        "--tcp-info-enabled", "--tcp-info-interval", "10s", "--tcp-info-namespaces", lab.srv,
        "--tcp-info-local-ports", "8080", "--tcp-info-salt", "e2e", "--cc-netns", lab.srv,
        "--kafka-shutdown-timeout", "5s",
    ], tmp_path / "collector.log")
    sizes = {"small": 1024, "medium": 200 * 1024, "big": 2 * 1024 * 1024}
    paths = [random.Random(3).choice(["small"] * 6 + ["medium"] * 3 + ["big"]) for _ in range(60)]
    try:
        col.start()
        wait_until("close capture up", lambda: col.metrics().get("ccab_collector_close_capture_up", 0) == 1)
        for p in paths:  # one connection each
            assert lab.get([p]) == [200]
        wait_until("every close emitted", lambda: metric_sum(col.metrics(), "ccab_collector_close_emitted_total")
                   >= len(paths), timeout=60)
        wait_until("delivered", lambda: col.metrics().get("ccab_collector_inflight_records") == 0, timeout=60)
        assert col.stop(signal.SIGTERM) == 0, col.tail()
    finally:
        col.kill_quietly()
    loader = Loader(warehouse, kafka_broker, {conn_topic: SCHEMAS["tcp_conn/1"], tcp_topic: SCHEMAS["tcp_sample/1"]},
                    group=f"g-{conn_topic}", batch_wait_s=0.2)
    assert loader.run(max_idle_s=4).dead_total == 0
    rows = warehouse.query(f"SELECT sock_id, bytes_acked, cc, cc_source FROM tcp_conns WHERE _topic = '{conn_topic}'").rows
    assert len(rows) == len(paths) and len({r[0] for r in rows}) == len(paths), "each connection exactly once"
    # the server's bytes_acked = response bytes + its FIN; each response is headers + the file
    bodies = sorted(sizes[p] for p in paths)
    acked = sorted(r[1] for r in rows)
    assert all(0 < a - b < 1024 for a, b in zip(acked, bodies)), "final bytes_acked = body + headers + FIN"
    assert {r[2] for r in rows} <= {"cubic", "bbr", "reno", "bbr2"} and all(r[2] for r in rows)
    polled = warehouse.query(f"SELECT uniqExact(sock_id) FROM tcp_samples WHERE _topic = '{tcp_topic}'").scalar()
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    run_window(warehouse, hour - timedelta(hours=1), hour + timedelta(hours=1), lookback=False)
    n = warehouse.query("SELECT sum(n) + sum(n_missing) FROM cohort_hourly WHERE host = 'edge-cc' "
                        "AND metric = 'retrans_pct' AND segment = 'all'").scalar()
    print(f"\nclose capture: {len(rows)} of {len(paths)} connections captured at close; the 10 s poll saw {polled}")
    assert int(n) == len(paths), "the hourly job counts every connection once, from its close record"
