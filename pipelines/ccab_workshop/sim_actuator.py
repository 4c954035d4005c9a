"""SIMULATED actuator: stands in for ``ccab-agent`` on the *simulated* hosts of ``ccab sim``.

It changes no kernel. Like an agent it consumes ``assignment/1`` records from the compacted
topic, verifies the Ed25519 signature and the generation (forged/tampered -> ``refused``; not
newer than what it applied -> ignored), and answers ``agent_status/1`` (``applied``, with
``cc_effective`` = the assigned cc). What it "applied" goes to
``$CCAB_DATA_DIR/sim-actuator/applied.json`` and, as ``{host: arm}``, to ``arm-map.json`` — which
``ccab sim SCENARIO --arm-map FILE`` reads, so the next simulated window runs each host on the
arm the controller assigned.

Real hosts run ``bin/ccab-agent`` (rollout/README.md); never point this at a real fleet.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import signal
import sys
import time
from pathlib import Path

from ccab.base import atomicfile
from ccab.base.config import settings
from ccab.base.contracts import AGENT_STATUS, ASSIGNMENT, TOPIC_AGENT_STATUS, TOPIC_ASSIGNMENTS, validate
from ccab.rollout.signing import KeyError_, load_public_key, verify

SIM_CC_AVAILABLE = ["reno", "cubic", "bbr", "bbr2"]  # the simulator's kernels offer all of these
SIM_KERNEL = "simulated"


def actuator_dir(data_dir: Path | None = None) -> Path:
    if data_dir is None:

        data_dir = settings().data_dir
    return Path(data_dir) / "sim-actuator"


class SimActuator:
    def __init__(self, bootstrap: str, public_key, out_dir: Path, *, hosts_glob: str = "*",
                 assignments_topic: str | None = None, status_topic: str | None = None):
        from confluent_kafka import Producer


        self.bootstrap, self.key, self.dir, self.glob = bootstrap, public_key, Path(out_dir), hosts_glob
        self.a_topic = assignments_topic or TOPIC_ASSIGNMENTS
        self.s_topic = status_topic or TOPIC_AGENT_STATUS
        self.dir.mkdir(parents=True, exist_ok=True)
        self.applied: dict[str, dict] = self._load("applied.json", {})
        self.offsets: dict[str, int] = self._load("offsets.json", {})
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5})
        self.counts = {"applied": 0, "refused": 0, "stale": 0, "skipped": 0}
        self._stop = False

    def _load(self, name: str, default):
        try:
            return json.loads((self.dir / name).read_text())
        except (OSError, ValueError):
            return default

    def _save(self) -> None:
        atomicfile.write_bytes(self.dir / "applied.json", (json.dumps(self.applied, indent=1, sort_keys=True) + "\n").encode())
        arm_map = {h: v["arm"] for h, v in sorted(self.applied.items())}
        atomicfile.write_bytes(self.dir / "arm-map.json", (json.dumps(arm_map, indent=1) + "\n").encode())
        atomicfile.write_bytes(self.dir / "offsets.json", json.dumps(self.offsets).encode())

    def _status(self, rec: dict, state: str, reason: str = "") -> None:
        host = str(rec.get("host", ""))
        prev = self.applied.get(host, {})
        ok = state == "applied"
        status = {"schema": "agent_status/1", "ts_ms": int(time.time() * 1000), "pop": str(rec.get("pop", "")),
                  "host": host, "kernel": SIM_KERNEL,
                  "rollout_id": str(rec.get("rollout_id", "")) if ok else prev.get("rollout_id", ""),
                  "arm": str(rec.get("arm", "")) if ok else prev.get("arm", ""),
                  "generation": int(rec.get("generation", 0)) if isinstance(rec.get("generation"), int) else 0,
                  "state": state, "cc_effective": rec["cc"] if ok else prev.get("cc", "cubic"),
                  "cc_available": SIM_CC_AVAILABLE, "qdisc_effective": rec.get("qdisc") if ok else prev.get("qdisc"),
                  "reason": reason}
        assert not validate(status, AGENT_STATUS), validate(status, AGENT_STATUS)
        self._producer.produce(self.s_topic, key=host.encode(), value=json.dumps(status).encode())

    def handle(self, value: bytes) -> str:
        try:
            rec = json.loads(value)
        except (TypeError, ValueError):
            self.counts["skipped"] += 1
            return "skipped"
        if not isinstance(rec, dict) or not fnmatch.fnmatch(str(rec.get("host", "")), self.glob):
            self.counts["skipped"] += 1
            return "skipped"
        problems = validate(rec, ASSIGNMENT)
        why = "; ".join(problems) if problems else verify(rec, self.key)
        if why:
            self._status(rec, "refused", f"refused: {why}")
            self.counts["refused"] += 1
            return "refused"
        if rec["cc"] not in SIM_CC_AVAILABLE:
            self._status(rec, "refused", f"congestion control {rec['cc']!r} not available "
                                         f"(available: {' '.join(SIM_CC_AVAILABLE)})")
            self.counts["refused"] += 1
            return "refused"
        host = rec["host"]
        if rec["generation"] <= self.applied.get(host, {}).get("generation", 0):
            self.counts["stale"] += 1
            return "stale"
        self.applied[host] = {k: rec[k] for k in ("pop", "rollout_id", "arm", "cc", "qdisc", "generation")}
        self._status(rec, "applied")
        self.counts["applied"] += 1
        return "applied"

    def run(self, exit_when_idle_s: float | None = None, say=print) -> dict:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "ccab-sim-actuator",
                      "enable.auto.commit": False})
        md = c.list_topics(self.a_topic, timeout=15)
        parts = sorted(md.topics[self.a_topic].partitions)
        c.assign([TopicPartition(self.a_topic, p, self.offsets.get(str(p), OFFSET_BEGINNING)) for p in parts])
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "_stop", True))
        last = time.monotonic()
        try:
            while not self._stop:
                msgs = c.consume(500, 0.5)
                msgs = [m for m in msgs if not m.error()]
                if msgs:
                    for m in msgs:
                        outcome = self.handle(m.value())
                        if outcome in ("applied", "refused"):
                            rec = json.loads(m.value())
                            say(f"sim-actuator: {rec.get('host')} {outcome} {rec.get('arm')}/{rec.get('cc')} "
                                f"generation {rec.get('generation')}")
                        self.offsets[str(m.partition())] = m.offset() + 1
                    if self._producer.flush(15):
                        raise RuntimeError(f"agent_status not acknowledged by {self.bootstrap}")
                    self._save()
                    last = time.monotonic()
                elif exit_when_idle_s is not None and time.monotonic() - last >= exit_when_idle_s:
                    break
        finally:
            c.close()
            self._producer.flush(15)
        return dict(self.counts)


def register(rs) -> None:
    a = rs.add_parser("sim-actuator", help="SIMULATED hosts: apply assignments for `ccab sim` (no kernel changes)",
                      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--public-key", required=True, type=Path, metavar="FILE",
                   help="controller's Ed25519 public key (base64 of 32 bytes, or PEM)")
    a.add_argument("--hosts", default="*", metavar="GLOB", help="act only for these hosts (default: all)")
    a.add_argument("--exit-when-idle", type=float, metavar="S", help="exit after S seconds without records "
                                                                     "(default: run until SIGTERM)")
    a.add_argument("--dir", type=Path, help="state dir (default: $CCAB_DATA_DIR/sim-actuator)")
    a.add_argument("--assignments-topic", metavar="TOPIC", help="default ccab.assignments.v1")
    a.add_argument("--status-topic", metavar="TOPIC", help="default ccab.agent_status.v1")
    a.set_defaults(func=cmd_sim_actuator)


def cmd_sim_actuator(args) -> int:

    try:
        key = load_public_key(args.public_key)
    except KeyError_ as exc:
        print(f"ccab rollout sim-actuator: {exc}", file=sys.stderr)
        return 2
    act = SimActuator(settings().bootstrap_servers, key, args.dir or actuator_dir(), hosts_glob=args.hosts,
                      assignments_topic=args.assignments_topic, status_topic=args.status_topic)
    try:
        counts = act.run(args.exit_when_idle)
    except Exception as exc:  # noqa: BLE001 - a broker problem is reported, not a traceback
        print(f"ccab rollout sim-actuator: {exc}", file=sys.stderr)
        return 1
    print(f"sim-actuator: {counts}; arm map: {act.dir / 'arm-map.json'}")
    return 0
