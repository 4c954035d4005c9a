"""Where ccab's resources are: the one place that reads the environment.

One switch per engine, same code either way (Dagster-style resource selection):

- ``CCAB_CLICKHOUSE_URL`` unset -> the local warehouse service (``ccab warehouse up``), which owns
  the embedded engine (chdb) at ``$CCAB_DATA_DIR/warehouse`` and speaks ClickHouse's HTTP interface
  on 127.0.0.1:``CCAB_WAREHOUSE_PORT``; set (``http://user:pass@host:8123/ccab``) -> that ClickHouse
  server. Either way every process reaches it through clickhouse-connect.
- ``CCAB_CLICKHOUSE_SHARDS`` unset -> one node (above). ``N`` (an integer >= 1) -> N shard databases
  ``<db>_shard0`` .. ``<db>_shard<N-1>`` on the one engine above (embedded or server): the layout the
  tests rehearse a cluster with. ``url0,url1,...`` -> one ClickHouse server per shard, in the
  cluster's shard order, each URL naming that shard's local database. The loader splits each batch
  by ``cityHash64(host) % N``; ``ccab cohorts run --shard K`` runs the hourly job on shard K.
- ``CCAB_KAFKA_BROKERS`` unset -> the local single-node broker that ``ccab kafka up`` runs;
  set (``host1:9092,host2:9092``) -> that cluster; ccab starts nothing.
- ``CCAB_DATA_DIR`` (default ``.ccab`` in the repository checkout, wherever the command runs from,
  so a command run from another directory finds the same warehouse and broker instead of silently
  creating an empty ``.ccab`` there): local state of the embedded engines (warehouse, broker
  data, pid files, logs).
- ``CCAB_KAFKA_PORT`` (default 19092): port of the local broker.
- ``CCAB_WAREHOUSE_PORT`` (default 18123): port of the local warehouse service (127.0.0.1 only).
- ``CCAB_CACHE_DIR`` (default ``~/.cache/ccab``): downloaded Kafka jars, outside the repo.
- ``CCAB_ALERT_WEBHOOK_URL`` (default unset): where the judge POSTs page/ticket alerts
  (Alertmanager API v2 shape, e.g. ``http://alertmanager:9093/api/v2/alerts``).
- ``CCAB_REPORT_URL`` (default ``file://$CCAB_DATA_DIR/reports/{rollout_id}/index.html``): the
  canary report an alert links to; ``{rollout_id}`` is filled in.
- ``CCAB_ROLLOUT_KEY`` (default unset): the controller's Ed25519 signing key file (``--key`` wins).
- ``CCAB_COLLECTOR_BIN``, ``CCAB_AGENT_BIN`` (default ``bin/ccab-collector``, ``bin/ccab-agent``):
  the edge binaries the lab runs; ``CCAB_LAB_AGENT_ARGS``: extra arguments for the lab's agent.
- ``JAVA_HOME`` (default: ``java`` on PATH): the JVM of the local Kafka broker.

Every ``CCAB_*`` variable is read here and nowhere else (a test checks it); Airflow's own
``AIRFLOW_*`` variables are set by :mod:`ccab_workshop.dags_local` for the Airflow process it starts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_KAFKA_PORT = 19092
DEFAULT_WAREHOUSE_PORT = 18123
#: the repository checkout (sql/, dags/, dashboards/ are read from it)
REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    cache_dir: Path
    clickhouse_url: str | None
    kafka_brokers: str | None
    kafka_port: int
    alert_webhook_url: str | None = None
    report_url_template: str = ""
    rollout_key: Path | None = None
    collector_bin: Path = REPO_ROOT / "bin" / "ccab-collector"
    agent_bin: Path = REPO_ROOT / "bin" / "ccab-agent"
    lab_agent_args: tuple[str, ...] = ()
    java_home: Path | None = None
    #: None (one node), an int N (N shard databases on the one engine) or one URL per shard
    clickhouse_shards: int | tuple[str, ...] | None = None
    warehouse_port: int = DEFAULT_WAREHOUSE_PORT
    #: how long a process that finds the local warehouse service down waits for it to answer (a
    #: restart, its migrations) before the one-line error (CCAB_WAREHOUSE_WAIT_S; 0: fail at once)
    warehouse_wait_s: float = 20.0

    @property
    def shard_count(self) -> int:
        """How many shards the warehouse has (1 without a shard layout)."""
        if self.clickhouse_shards is None:
            return 1
        return self.clickhouse_shards if isinstance(self.clickhouse_shards, int) else len(self.clickhouse_shards)

    @property
    def embedded_clickhouse(self) -> bool:
        return not self.clickhouse_url

    @property
    def local_warehouse_url(self) -> str:
        """The local warehouse service's URL (database ``ccab``), used when CCAB_CLICKHOUSE_URL is unset."""
        return f"http://127.0.0.1:{self.warehouse_port}/ccab"

    @property
    def embedded_kafka(self) -> bool:
        return not self.kafka_brokers

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / "warehouse"

    @property
    def bootstrap_servers(self) -> str:
        """Kafka bootstrap servers: the configured cluster, or the local broker."""
        return self.kafka_brokers or f"127.0.0.1:{self.kafka_port}"


def parse_shards(text: str | None) -> int | tuple[str, ...] | None:
    """``CCAB_CLICKHOUSE_SHARDS``: unset/empty -> None, ``N`` -> N, ``url,url,...`` -> the URLs."""
    text = (text or "").strip()
    if not text:
        return None
    if text.isdigit():
        n = int(text)
        if n < 1:
            raise SystemExit(f"CCAB_CLICKHOUSE_SHARDS must be a shard count >= 1 or a list of URLs, got {text!r}")
        return n
    urls = tuple(u.strip() for u in text.split(","))
    bad = [u for u in urls if not re.match(r"^https?://[^/]+", u)]
    if bad:
        raise SystemExit(f"CCAB_CLICKHOUSE_SHARDS: {bad[0]!r} is neither a shard count nor an http(s):// URL "
                         "(give N, or one URL per shard: http://ch1:8123/ccab_local,http://ch2:8123/ccab_local)")
    return urls


def settings() -> Settings:
    """Read the environment now (not at import time, so tests can change it)."""
    env = os.environ
    port_text = env.get("CCAB_KAFKA_PORT", str(DEFAULT_KAFKA_PORT))
    try:
        port = int(port_text)
    except ValueError:
        raise SystemExit(f"CCAB_KAFKA_PORT must be a port number, got {port_text!r}") from None
    wh_port_text = env.get("CCAB_WAREHOUSE_PORT") or str(DEFAULT_WAREHOUSE_PORT)
    if not wh_port_text.isdigit() or not 0 < int(wh_port_text) < 65536:
        raise SystemExit(f"CCAB_WAREHOUSE_PORT must be a port number, got {wh_port_text!r}")
    wait_text = env.get("CCAB_WAREHOUSE_WAIT_S") or "20"
    try:
        wh_wait_s = float(wait_text)
        if not 0 <= wh_wait_s < 1e6:
            raise ValueError
    except ValueError:
        raise SystemExit(f"CCAB_WAREHOUSE_WAIT_S must be seconds >= 0, got {wait_text!r}") from None
    cache = env.get("CCAB_CACHE_DIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ccab"
    )
    data_dir = Path(env.get("CCAB_DATA_DIR") or REPO_ROOT / ".ccab").absolute()
    return Settings(
        data_dir=data_dir,
        cache_dir=Path(cache),
        clickhouse_url=env.get("CCAB_CLICKHOUSE_URL") or None,
        kafka_brokers=env.get("CCAB_KAFKA_BROKERS") or None,
        kafka_port=port,
        alert_webhook_url=env.get("CCAB_ALERT_WEBHOOK_URL") or None,
        report_url_template=env.get("CCAB_REPORT_URL") or f"file://{data_dir}/reports/{{rollout_id}}/index.html",
        rollout_key=Path(env["CCAB_ROLLOUT_KEY"]) if env.get("CCAB_ROLLOUT_KEY") else None,
        collector_bin=Path(env.get("CCAB_COLLECTOR_BIN") or REPO_ROOT / "bin" / "ccab-collector"),
        agent_bin=Path(env.get("CCAB_AGENT_BIN") or REPO_ROOT / "bin" / "ccab-agent"),
        lab_agent_args=tuple((env.get("CCAB_LAB_AGENT_ARGS") or "").split()),
        java_home=Path(env["JAVA_HOME"]) if env.get("JAVA_HOME") else None,
        clickhouse_shards=parse_shards(env.get("CCAB_CLICKHOUSE_SHARDS")),
        warehouse_port=int(wh_port_text),
        warehouse_wait_s=wh_wait_s,
    )
