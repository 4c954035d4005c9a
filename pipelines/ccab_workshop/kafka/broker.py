"""A real single-node Kafka broker for development and tests, run from Maven Central jars.

There is no Kafka package on these machines, so ``ccab kafka install`` resolves the broker
jars (``org.apache.kafka:kafka_2.13`` and ``kafka-tools``, plus the log4j2 binding for slf4j)
with Maven into ``<cache_dir>/kafka-<version>/libs`` -- outside the repo -- and ``ccab kafka up``
runs ``kafka.Kafka`` from them as a single-node KRaft broker+controller listening on 127.0.0.1
only. All of its state (server.properties, log dirs, pid file, broker.log) lives under
``<data_dir>/kafka``.

When ``CCAB_KAFKA_BROKERS`` is set, ccab uses that cluster instead: ``up`` starts nothing and only
makes sure the topics in :data:`ccab.kafka.topics.TOPICS` exist there.

Commands (:mod:`ccab.cli.kafka`)::

    ccab kafka install                      # fetch the jars once (idempotent)
    ccab kafka up [--port N] [--timeout S]  # start (or reuse) the broker, create the topics
    ccab kafka status                       # exit 0 if reachable, 1 if not
    ccab kafka down                         # stop the broker this data dir started

Layout: pure functions (``render_*``, :func:`parse_listener_port`, :func:`new_cluster_id`) build
file contents and do no I/O, so unit tests can check them; everything else does the I/O.
Process checks read ``/proc`` (Linux), falling back to ``ps`` elsewhere.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ccab.base import atomicfile
from ccab.base.config import Settings, settings
from ccab.kafka.topics import KafkaLocalError, admin_client, ensure_topics

# --- versions ------------------------------------------------------------------------------------

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# Kafka 4.1.1 pulls slf4j-api 1.7.36 and log4j-core 2.24.3 (its own logging backend), so the
# slf4j binding is log4j2's slf4j-1.x bridge of the same version: one logging system, one config.
LOG4J_VERSION = "2.24.3"
# Pinned so the install does not depend on the Maven version's default plugin.
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

# (groupId, artifactId, version) resolved with their runtime dependencies.
ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("org.apache.kafka", f"kafka_{SCALA_VERSION}", KAFKA_VERSION),
    ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)

BROKER_HEAP = "-Xmx512m"
MAVEN_TIMEOUT_S = 900
FORMAT_TIMEOUT_S = 120
STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 30

Progress = Callable[[str], None]


def _say(message: str) -> None:
    """Default progress reporter: one line on stdout."""
    print(f"kafka: {message}", flush=True)


# --- paths ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateFiles:
    """The files in one broker's state directory (the local broker's, or a cluster node's)."""

    state_dir: Path

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def properties(self) -> Path:
        return self.state_dir / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "broker.log"


@dataclass(frozen=True)
class Paths(StateFiles):
    """Where the jar cache and the broker's state live (``state_dir``: <data_dir>/kafka, everything
    of one local broker)."""

    home: Path        # <cache_dir>/kafka-<version>: jars and logging config, shared by data dirs

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def marker(self) -> Path:
        return self.home / ".ccab-installed"

    @property
    def log4j_config(self) -> Path:
        return self.home / "config" / "log4j2.properties"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / ".lock"


def paths(s: Settings | None = None) -> Paths:
    """The paths for the current settings (read from the environment when ``s`` is None)."""
    s = s or settings()
    return Paths(home=s.cache_dir / f"kafka-{KAFKA_VERSION}", state_dir=s.data_dir / "kafka")


# --- pure rendering ------------------------------------------------------------------------------


def render_pom(artifacts: tuple[tuple[str, str, str], ...] = ARTIFACTS) -> str:
    """A throw-away Maven project whose dependencies are ``artifacts``; ``mvn
    dependency:copy-dependencies`` on it copies them and their runtime dependencies."""
    deps = "\n".join(
        "    <dependency>\n"
        f"      <groupId>{group}</groupId>\n"
        f"      <artifactId>{artifact}</artifactId>\n"
        f"      <version>{version}</version>\n"
        "    </dependency>"
        for group, artifact, version in artifacts
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <!-- generated by ccab_workshop.kafka.broker: only used to resolve the Kafka broker jars -->
  <groupId>local.ccab</groupId>
  <artifactId>ccab-kafka-jars</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def render_log4j_config() -> str:
    """log4j2 configuration for the broker: everything to the file named by the
    ``ccab.kafka.log.file`` system property (size-rolled), nothing to the console."""
    return """# generated by ccab_workshop.kafka.broker: the local broker logs to a file, not the console
status = warn
name = ccab-kafka

appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = ${sys:ccab.kafka.log.file}
appender.file.filePattern = ${sys:ccab.kafka.log.file}.%i
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3

rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE

# one line per request at INFO is far too much for a dev broker
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def render_server_properties(port: int, controller_port: int, log_dir: Path | str) -> str:
    """``server.properties`` of a single-node KRaft broker+controller on 127.0.0.1 only.

    ``port`` is the client listener, ``controller_port`` the KRaft controller listener, and
    ``log_dir`` holds the partitions and the metadata log.
    """
    return f"""# generated by ccab_workshop.kafka.broker: single-node KRaft broker for development and tests
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={log_dir}

# one node: every internal topic has a single replica
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# topics are created explicitly (ccab kafka up), never by a typo in a producer
auto.create.topics.enable=false
num.partitions=6
group.initial.rebalance.delay.ms=0
log.retention.hours=168
"""


def parse_listener_port(properties_text: str) -> int | None:
    """The PLAINTEXT client port in a ``server.properties`` text, or None if there is none."""
    for line in properties_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "listeners":
            for listener in value.split(","):
                name, _, address = listener.strip().partition("://")
                if name == "PLAINTEXT" and ":" in address:
                    return int(address.rsplit(":", 1)[1])
    return None


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64 without padding (the format
    of ``kafka-storage random-uuid``), never starting with '-' (it would look like an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def _fingerprint() -> str:
    """Identifies what an install contains; a different fingerprint means install again."""
    text = render_pom() + render_log4j_config() + MAVEN_DEPENDENCY_PLUGIN
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- small I/O helpers ---------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (two `up`/`install` at once wait for each other)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file ("" if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _java() -> str:
    """The java executable ($JAVA_HOME/bin/java, else java on PATH)."""
    java_home = settings().java_home
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise KafkaLocalError(
            "java not found: the local Kafka broker needs Java 17+ "
            "(apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    return found


def _split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """``"h1:9092,[::1]:9093"`` -> ``[("h1", 9092), ("::1", 9093)]``."""
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise KafkaLocalError(f"bad bootstrap server {item!r}: expected host:port")
        out.append((host.strip("[]"), int(port)))
    return out


def _port_answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _port_is_free(port: int) -> bool:
    """True if 127.0.0.1:port can be bound (with SO_REUSEADDR, like Kafka's own listeners)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low(default: int = 32768) -> int:
    """The lowest port the kernel hands out to outgoing connections (ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def find_free_port_pair(attempts: int = 200) -> int:
    """A port ``p`` such that ``p`` and ``p + 1`` are both free on 127.0.0.1 right now (client and
    controller ports for a test broker), drawn at random below the kernel's ephemeral range: a
    port from that range (``bind(0)``'s) is soon reused by some outgoing connection — a Kafka
    client's, say — and the broker then fails with "Address already in use". Another process may
    still take the pair before use."""
    import random

    high = _ephemeral_low() - 2
    low = min(20000, high - 1000)
    for _ in range(attempts):
        port = random.randrange(low, high)
        if _port_is_free(port) and _port_is_free(port + 1):
            return port
    raise KafkaLocalError(f"found no two adjacent free ports on 127.0.0.1 in {attempts} attempts")


# --- process bookkeeping -------------------------------------------------------------------------

# Brokers started by this Python process, so `down` can reap them (no zombies, no warnings).
_children: dict[int, subprocess.Popen] = {}


def _cmdline(pid: int) -> list[str]:
    """The argv of process ``pid`` ([] if it is gone or a zombie)."""
    if Path("/proc/self/cmdline").exists():
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return []
        return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    # no /proc (not Linux): ask ps (whitespace-split, good enough for the checks below)
    result = subprocess.run(
        ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return result.stdout.split()


def _is_our_broker(pid: int, p: Paths) -> bool:
    """True if ``pid`` is alive and is a kafka.Kafka started with this data dir's properties."""
    child = _children.get(pid)
    if child is not None:  # started by this process: no need to guess from its command line
        return child.poll() is None
    for _ in range(3):
        argv = _cmdline(pid)
        if argv or not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.05)  # an empty command line is also seen for a moment around exec
    return "kafka.Kafka" in argv and str(p.properties) in argv


def _read_pid(p: Paths) -> int | None:
    try:
        return int(p.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def broker_pid(p: Paths | None = None) -> int | None:
    """The pid of this data dir's broker if it is alive, else None (a stale pid file is removed)."""
    p = p or paths()
    pid = _read_pid(p)
    if pid is None:
        return None
    if _is_our_broker(pid, p):
        return pid
    p.pid_file.unlink(missing_ok=True)
    return None


def _configured_port(p: Paths) -> int | None:
    """The client port in this data dir's server.properties (the port the broker was started on)."""
    try:
        return parse_listener_port(p.properties.read_text())
    except FileNotFoundError:
        return None


def local_bootstrap(s: Settings | None = None) -> str:
    """Bootstrap servers of the local broker: the port it runs on if it runs, else the setting."""
    s = s or settings()
    p = paths(s)
    port = (_configured_port(p) if broker_pid(p) else None) or s.kafka_port
    return f"127.0.0.1:{port}"


def is_running() -> bool:
    """True if this data dir's broker process is alive and its client port answers.
    (With ``CCAB_KAFKA_BROKERS`` set: True if that cluster answers.)"""
    s = settings()
    if not s.embedded_kafka:
        return any(_port_answers(h, port) for h, port in _split_bootstrap(s.bootstrap_servers))
    p = paths(s)
    if broker_pid(p) is None:
        return False
    return _port_answers("127.0.0.1", _configured_port(p) or s.kafka_port)


# --- install -------------------------------------------------------------------------------------


def install(progress: Progress = _say) -> Path:
    """Resolve the broker jars into ``<cache_dir>/kafka-<version>/libs`` with Maven and write the
    log4j2 config. Idempotent: a marker file records a finished install. Returns the libs dir."""
    p = paths()
    if _is_installed(p):
        progress(f"jars already installed in {p.libs}")
        return p.libs
    with _locked(p.home.parent / f".kafka-{KAFKA_VERSION}.lock"):
        if _is_installed(p):  # another process finished it while we waited
            progress(f"jars already installed in {p.libs}")
            return p.libs
        mvn = shutil.which("mvn")
        if not mvn:
            raise KafkaLocalError(
                "mvn not found: Maven is needed once, to fetch the Kafka jars from Maven Central "
                "(apt-get install maven, or put mvn on PATH)"
            )
        p.home.mkdir(parents=True, exist_ok=True)
        names = ", ".join(f"{g}:{a}:{v}" for g, a, v in ARTIFACTS)
        progress(f"resolving {names} with Maven (first run downloads ~55 MB)")
        staging = p.home / f"libs.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="ccab-kafka-pom-") as pom_dir:
            pom = Path(pom_dir) / "pom.xml"
            pom.write_text(render_pom())
            command = [
                mvn, "-B", "-q", "-f", str(pom),
                f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={staging}",
                "-DincludeScope=runtime",
            ]
            started = time.monotonic()
            try:
                result = subprocess.run(
                    command, cwd=pom_dir, capture_output=True, text=True,
                    timeout=MAVEN_TIMEOUT_S, check=False,
                )
            except subprocess.TimeoutExpired:
                shutil.rmtree(staging, ignore_errors=True)
                raise KafkaLocalError(
                    f"Maven did not finish resolving the Kafka jars in {MAVEN_TIMEOUT_S} s; "
                    "check that Maven Central is reachable and run `ccab kafka install` again"
                ) from None
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            output = "\n".join((result.stdout + result.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise KafkaLocalError(
                f"Maven could not resolve the Kafka jars (exit {result.returncode}). Check that "
                f"Maven Central is reachable (proxy settings in ~/.m2/settings.xml) and run "
                f"`ccab kafka install` again. Maven said:\n{output}"
            )
        jars = sorted(staging.glob("*.jar"))
        for _, artifact, version in ARTIFACTS:
            if not (staging / f"{artifact}-{version}.jar").exists():
                shutil.rmtree(staging, ignore_errors=True)
                raise KafkaLocalError(
                    f"Maven finished but {artifact}-{version}.jar is missing from the result; "
                    "run `ccab kafka install` again"
                )
        shutil.rmtree(p.libs, ignore_errors=True)
        os.replace(staging, p.libs)
        atomicfile.write_text(p.log4j_config, render_log4j_config())
        atomicfile.write_text(p.marker, _fingerprint() + "\n")
        progress(
            f"installed {len(jars)} jars in {p.libs} ({time.monotonic() - started:.0f} s); "
            f"broker logging config {p.log4j_config}"
        )
        return p.libs


def _is_installed(p: Paths) -> bool:
    try:
        marker = p.marker.read_text().strip()
    except FileNotFoundError:
        return False
    return marker == _fingerprint() and p.libs.is_dir() and p.log4j_config.is_file()


# --- readiness and topics ------------------------------------------------------------------------


def wait_ready(
    bootstrap: str,
    timeout_s: float = 60.0,
    still_starting: Callable[[], str | None] | None = None,
) -> None:
    """Wait until a broker at ``bootstrap`` answers a metadata request listing at least one broker.

    ``still_starting`` (optional) is called between attempts; if it returns a message, the wait
    stops early with that message (e.g. "the broker process exited"). Raises KafkaLocalError on
    timeout.
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    addresses = _split_bootstrap(bootstrap)
    admin = None
    last_error = "no answer yet"
    while True:
        if still_starting is not None:
            problem = still_starting()
            if problem:
                raise KafkaLocalError(problem)
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise KafkaLocalError(
                f"Kafka at {bootstrap} did not answer within {timeout_s:.0f} s ({last_error})"
            )
        # A plain TCP probe first: cheap, and it keeps librdkafka from backing off while the
        # broker is still starting.
        if not any(_port_answers(host, port, min(1.0, remaining_s)) for host, port in addresses):
            last_error = "connection refused"
            time.sleep(min(0.3, max(0.0, deadline - time.monotonic())))
            continue
        if admin is None:
            admin = admin_client(bootstrap)
        try:
            metadata = admin.list_topics(timeout=max(0.5, min(5.0, remaining_s)))
        except KafkaException as exc:
            last_error = str(exc.args[0]) if exc.args else str(exc)
            time.sleep(0.3)
            continue
        if metadata.brokers:
            return
        last_error = "metadata lists no brokers yet"
        time.sleep(0.3)


# --- up / down -----------------------------------------------------------------------------------


def up(port: int | None = None, timeout_s: float = 60.0, progress: Progress = _say) -> str:
    """Make sure a broker answers and the topics exist; return its bootstrap servers.

    With ``CCAB_KAFKA_BROKERS`` set, nothing is started: the topics are ensured on that cluster.
    Otherwise the local broker of ``<data_dir>/kafka`` is reused if it runs, or installed,
    formatted (once) and started on ``port`` (default: ``CCAB_KAFKA_PORT``; the KRaft controller
    uses ``port + 1``). Raises KafkaLocalError if it does not answer within ``timeout_s``.
    """
    s = settings()
    if not s.embedded_kafka:
        bootstrap = s.bootstrap_servers
        progress(f"CCAB_KAFKA_BROKERS is set: using the external cluster {bootstrap}, starting nothing")
        wait_ready(bootstrap, timeout_s)
        _report_topics(ensure_topics(bootstrap, timeout_s=timeout_s), progress)
        return bootstrap

    p = paths(s)
    port = port or s.kafka_port
    with _locked(p.lock_file):
        pid = broker_pid(p)
        if pid is not None:
            running_port = _configured_port(p) or port
            bootstrap = f"127.0.0.1:{running_port}"
            if running_port != port:
                progress(f"note: the running broker listens on {running_port}, not {port}")
            try:
                wait_ready(bootstrap, timeout_s, still_starting=lambda: _exited_message(pid, p))
            except KafkaLocalError as exc:
                raise KafkaLocalError(
                    f"{exc}. The broker process {pid} of {p.state_dir} runs but does not answer; "
                    f"see {p.log_file}, or restart it with `ccab kafka down` and `ccab kafka up`."
                ) from None
            progress(f"already running (pid {pid}) at {bootstrap}")
        else:
            bootstrap = _start(p, port, timeout_s, progress)
    _report_topics(ensure_topics(bootstrap, timeout_s=timeout_s), progress)
    return bootstrap


def _report_topics(created: list[str], progress: Progress) -> None:
    if created:
        progress(f"created topics: {', '.join(created)}")
    else:
        progress("topics already exist")


def _exited_message(pid: int, p: Paths) -> str | None:
    """A message if the broker process ``pid`` is gone, else None (used while waiting)."""
    if _is_our_broker(pid, p):
        return None
    child = _children.get(pid)
    code = f" with code {child.returncode}" if child is not None and child.returncode is not None else ""
    return f"the broker process {pid} exited{code} while starting"


def _start(p: Paths, port: int, timeout_s: float, progress: Progress) -> str:
    """Install, configure, format and start the broker; wait until it answers. Lock held."""
    libs = install(progress)
    java = _java()
    controller_port = port + 1
    for needed in (port, controller_port):
        if not _port_is_free(needed):
            raise KafkaLocalError(
                f"port {needed} on 127.0.0.1 is already in use (the broker needs {port} for clients "
                f"and {controller_port} for its controller); stop what uses it, or pick other "
                "ports with CCAB_KAFKA_PORT / --port"
            )
    p.log_dir.mkdir(parents=True, exist_ok=True)
    atomicfile.write_text(p.properties, render_server_properties(port, controller_port, p.log_dir))
    jvm = [
        java, BROKER_HEAP, "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={p.log4j_config}",
        f"-Dccab.kafka.log.file={p.log_file}",
        f"-Dkafka.logs.dir={p.state_dir}",
        "-cp", f"{libs}/*",
    ]
    _format_storage(p, jvm, progress)

    progress(f"starting broker on 127.0.0.1:{port} (controller {controller_port}), log {p.log_file}")
    with open(p.log_file, "ab") as log:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log.write(f"===== ccab kafka up: starting broker on port {port} at {stamp} =====\n".encode())
        log.flush()
        child = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(p.properties)],
            cwd=p.state_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # own session and process group: no terminal signals
        )
    _children[child.pid] = child
    atomicfile.write_text(p.pid_file, f"{child.pid}\n")

    bootstrap = f"127.0.0.1:{port}"
    started = time.monotonic()
    try:
        wait_ready(bootstrap, timeout_s, still_starting=lambda: _exited_message(child.pid, p))
    except KafkaLocalError as exc:
        if _is_our_broker(child.pid, p):
            _stop(p, child.pid, progress=lambda _msg: None)
            hint = "Stopped it; if it is only slow, retry with a longer --timeout."
        else:
            hint = "The cause should be in its log."
        p.pid_file.unlink(missing_ok=True)
        raise KafkaLocalError(
            f"{exc}. {hint} Log: {p.log_file}; last {LOG_TAIL_LINES} lines:\n{_tail(p.log_file)}"
        ) from None
    progress(f"broker up (pid {child.pid}) at {bootstrap} in {time.monotonic() - started:.1f} s")
    return bootstrap


def _format_storage(p: Paths, jvm: list[str], progress: Progress) -> None:
    """Format the KRaft log dir once (skipped when it already has meta.properties)."""
    if (p.log_dir / "meta.properties").exists():
        return
    cluster_id = new_cluster_id()
    progress(f"formatting storage in {p.log_dir} (cluster id {cluster_id})")
    try:
        result = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(p.properties)],
            cwd=p.state_dir, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired:
        raise KafkaLocalError(
            f"formatting the Kafka storage took longer than {FORMAT_TIMEOUT_S} s; see {p.log_file}"
        ) from None
    if result.returncode != 0:
        raise KafkaLocalError(
            f"formatting the Kafka storage in {p.log_dir} failed (exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()}\nIf the directory is corrupt, stop the "
            f"broker and remove {p.state_dir}."
        )


def down(timeout_s: float = STOP_TIMEOUT_S, progress: Progress = _say) -> bool:
    """Stop the broker this data dir started: SIGTERM, then SIGKILL after ``timeout_s``.
    Returns True if a broker was stopped, False if none was running. Never signals a process
    that is not a kafka.Kafka of this data dir. With ``CCAB_KAFKA_BROKERS`` set: does nothing."""
    s = settings()
    if not s.embedded_kafka:
        progress("CCAB_KAFKA_BROKERS is set: the external cluster is not ours to stop")
        return False
    p = paths(s)
    with _locked(p.lock_file):
        pid = _read_pid(p)
        if pid is None:
            progress("not running")
            return False
        if not _is_our_broker(pid, p):
            p.pid_file.unlink(missing_ok=True)
            progress(f"not running (removed stale pid file for pid {pid})")
            return False
        stopped = _stop(p, pid, progress, timeout_s)
        p.pid_file.unlink(missing_ok=True)
        return stopped


def _stop(p: Paths, pid: int, progress: Progress, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM ``pid`` (our broker), wait up to ``timeout_s``, then SIGKILL. True if it stopped."""
    progress(f"stopping broker (pid {pid})")
    if not _signal(pid, signal.SIGTERM):
        return True
    if _wait_gone(pid, p, timeout_s):
        progress("broker stopped")
        return True
    progress(f"broker did not stop within {timeout_s:.0f} s; sending SIGKILL")
    _signal(pid, signal.SIGKILL)
    if _wait_gone(pid, p, 10.0):
        progress("broker killed")
        return True
    raise KafkaLocalError(f"broker pid {pid} survived SIGKILL; check it with `ps -p {pid}`")


def _signal(pid: int, sig: int) -> bool:
    """Send ``sig``; False if the process is already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        raise KafkaLocalError(f"not allowed to signal broker pid {pid}: {exc}") from None
    return True


def _wait_gone(pid: int, p: Paths, timeout_s: float) -> bool:
    """Wait until ``pid`` is no longer our broker (reaping it if it is our child)."""
    deadline = time.monotonic() + timeout_s
    child = _children.get(pid)
    if child is not None:
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        _children.pop(pid, None)
        return True
    while time.monotonic() < deadline:
        if not _is_our_broker(pid, p):
            return True
        time.sleep(0.2)
    return not _is_our_broker(pid, p)
