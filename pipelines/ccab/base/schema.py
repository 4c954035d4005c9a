"""Schema migrations: ``sql/migrations/NNNN_name.sql`` applied in order and recorded.

- ``ccab db migrate``: apply the files not yet recorded in ``schema_migrations``. Every statement
  is idempotent DDL (``IF NOT EXISTS``), so a half-applied file is safe to re-run.
- ``ccab db status``: what is applied, what is pending, and files changed since they were applied.
- ``ccab db gen-landing``: rewrite ``0002_landing.sql`` from :mod:`ccab.base.contracts`.
- ``ccab db cluster-ddl``: the same migrations for a ClickHouse cluster
  (Replicated*MergeTree ``_local`` tables + ``Distributed`` tables sharded by ``cityHash64(host)``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ccab.base import contracts
from ccab.base.config import REPO_ROOT
from ccab.base.warehouse import Warehouse, split_statements

MIGRATIONS_DIR = REPO_ROOT / "sql" / "migrations"
LANDING_FILE = MIGRATIONS_DIR / "0002_landing.sql"
_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version    UInt32,
    name       String,
    checksum   String,
    applied_at DateTime('UTC') DEFAULT now()
)
ENGINE = ReplacingMergeTree
ORDER BY version
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """All migration files in version order; a misnamed or duplicate file is an error."""
    found: dict[int, Migration] = {}
    for p in sorted(directory.glob("*.sql")):
        m = _NAME_RE.match(p.name)
        if not m:
            raise SystemExit(f"migration file {p} is not named NNNN_lowercase_name.sql")
        version = int(m.group(1))
        if version in found:
            raise SystemExit(f"two migrations share version {version}: {found[version].path.name}, {p.name}")
        found[version] = Migration(version, m.group(2), p)
    return [found[v] for v in sorted(found)]


def applied(wh: Warehouse) -> dict[int, str]:
    wh.command(_LEDGER_DDL)
    rows = wh.query("SELECT version, argMax(checksum, applied_at) FROM schema_migrations GROUP BY version").rows
    return {int(v): c for v, c in rows}


def _record(wh: Warehouse, mig: Migration) -> None:
    # later than any earlier record of this version, even within the same second
    wh.command(
        "INSERT INTO schema_migrations (version, name, checksum, applied_at) "
        "SELECT {v:UInt32}, {n:String}, {c:String}, greatest(now(), max(applied_at) + 1) "
        "FROM schema_migrations WHERE version = {v:UInt32}",
        params={"v": mig.version, "n": mig.name, "c": mig.checksum},
    )


def _drop_landing(wh: Warehouse) -> None:
    """Drop the derived landing objects (Null tables hold no rows; the views are stateless)."""
    for s in contracts.SCHEMAS.values():
        wh.command(f"DROP VIEW IF EXISTS {s.landing_table}_mv")
        wh.command(f"DROP TABLE IF EXISTS {s.landing_table}")
        wh.command(f"DROP TABLE IF EXISTS {s.check_table}")


def migrate(wh: Warehouse, directory: Path = MIGRATIONS_DIR, log=print) -> list[Migration]:
    """Apply pending migrations in order; return the ones applied (empty = nothing to do).

    Numbered migrations run once each. The landing layer (``0002_landing.sql``, generated from the
    contracts: Null-engine tables, check tables, materialized views into the raw tables) is derived
    state: it is applied after every numbered migration, and dropped and re-created whenever the
    file changed — so a contract change (a new field, a new record) reaches every warehouse with
    the raw-table columns its migration added. A loader inserting meanwhile gets an error and
    retries its batch (offsets are committed only after an insert), so nothing is lost.
    """
    done = applied(wh)
    ran = []
    landing = None
    for mig in discover(directory):
        if mig.path.name == LANDING_FILE.name:
            landing = mig
            continue
        if mig.version in done:
            continue
        for stmt in split_statements(mig.sql):
            wh.command(stmt)
        _record(wh, mig)
        log(f"applied {mig.path.name}")
        ran.append(mig)
    if landing is not None and done.get(landing.version) != landing.checksum:
        if landing.version in done:
            _drop_landing(wh)
        for stmt in split_statements(landing.sql):
            wh.command(stmt)
        _record(wh, landing)
        log(f"applied {landing.path.name}" + (" (re-created: the contracts changed)" if landing.version in done else ""))
        ran.append(landing)
    return ran


# --------------------------------------------------------------------------- cluster variant

_ALTER_RE = re.compile(r"^ALTER TABLE (\w+)\s+(.*)$", re.S)
_CREATE_TABLE_RE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+)\s*\(", re.S)
_ENGINE_RE = re.compile(r"ENGINE = (\w*MergeTree|Null)\b(\(\))?")
_CREATE_AS_RE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+) AS (\w+)\s*$")
_CREATE_DICT_RE = re.compile(r"^CREATE DICTIONARY IF NOT EXISTS (\w+)\b")
_MV_RE = re.compile(r"^CREATE MATERIALIZED VIEW IF NOT EXISTS (\w+) TO (\w+) AS(.*?)FROM (\w+)(.*?)\s*$", re.S)


def _shard_key(stmt: str) -> str:
    """Rows with a host go to its shard (what the loader splits by and the per-shard job needs);
    rows with a source position (dead letters) by topic-partition; anything else (judge results,
    watermarks, ...) anywhere: ``rand()``, the key needs no column."""
    if re.search(r"^\s+host\s", stmt, re.M):
        return "cityHash64(host)"
    if re.search(r"^\s+_topic\s", stmt, re.M) and re.search(r"^\s+_partition\s", stmt, re.M):
        return "cityHash64(_topic, _partition)"
    return "rand()"


def cluster_statements(sql: str, cluster: str = "{cluster}") -> list[str]:
    """Rewrite single-node DDL into the cluster variant.

    Each ``CREATE TABLE t`` becomes ``t_local`` (``ReplicatedMergeTree`` family, or ``Null`` for
    landing tables) on every node plus a ``Distributed`` ``t`` over it, so queries and inserts
    keep using ``t``. Materialized views read and write the ``_local`` tables on each shard.
    ``CREATE TABLE x AS y`` (the cohort job's stage tables) is y's definition under the name x,
    so x gets its own ``_local`` table and replication path (copying y's engine would copy y's
    path); a dictionary is created on every node. Data backfills (``INSERT``) are left out.
    """
    out = []
    created: dict[str, str] = {}  # table -> its single-node CREATE statement
    for stmt in split_statements(sql):
        if re.match(r"^INSERT\b", stmt):
            # a migration's one-time backfill of rows an existing single-node warehouse already
            # holds (e.g. 0017's daily rollups from the hourly ones): a cluster built from this DDL
            # starts empty, and INSERT cannot run ON CLUSTER; the cohort job fills what it needs
            continue
        same = _CREATE_AS_RE.match(stmt)
        if same and same.group(2) in created:
            stmt = created[same.group(2)].replace(f"CREATE TABLE IF NOT EXISTS {same.group(2)}",
                                                  f"CREATE TABLE IF NOT EXISTS {same.group(1)}", 1)
        d = _CREATE_DICT_RE.match(stmt)
        if d:
            out.append(stmt.replace(d.group(0), f"{d.group(0)} ON CLUSTER '{cluster}'", 1))
            continue
        t = _CREATE_TABLE_RE.match(stmt)
        if t:
            name = t.group(1)
            created[name] = stmt
            local = stmt.replace(f"CREATE TABLE IF NOT EXISTS {name}", f"CREATE TABLE IF NOT EXISTS {name}_local ON CLUSTER '{cluster}'", 1)

            def repl(m: re.Match) -> str:
                engine = m.group(1)
                if engine == "Null":
                    return "ENGINE = Null"
                return (f"ENGINE = Replicated{engine}('/clickhouse/tables/{{shard}}/{{database}}/{name}_local', "
                        "'{replica}')")

            local = _ENGINE_RE.sub(repl, local, count=1)
            out.append(local)
            out.append(
                f"CREATE TABLE IF NOT EXISTS {name} ON CLUSTER '{cluster}' AS {name}_local\n"
                f"ENGINE = Distributed('{cluster}', currentDatabase(), {name}_local, {_shard_key(stmt)})"
            )
            continue
        alter = _ALTER_RE.match(stmt)
        if alter:  # the same change on each shard's table and on the Distributed table over them
            name, rest = alter.groups()
            out.append(f"ALTER TABLE {name}_local ON CLUSTER '{cluster}' {rest}")
            out.append(f"ALTER TABLE {name} ON CLUSTER '{cluster}' {rest}")
            continue
        mv = _MV_RE.match(stmt)
        if mv:
            view, target, select, source, rest = mv.groups()
            # the view's own subqueries (the landing views' natural-key lookup) read the shard's
            # tables too: the inserted block and the rows of its hosts, which live on this shard
            rest = re.sub(rf"\bFROM ({re.escape(target)}|{re.escape(source)})\b", r"FROM \1_local", rest)
            out.append(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {view} ON CLUSTER '{cluster}' "
                       f"TO {target}_local AS{select}FROM {source}_local{rest}")
            continue
        out.append(stmt)
    return out
