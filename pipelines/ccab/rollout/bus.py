"""The controller's bus: the assignments topic it publishes to and the agents' status topic it
reads (:class:`KafkaBus` on ccab.rollout.publish; tests use an in-memory one), the pager protocol
(Alertmanager: service.AlertmanagerPager), and what an agent's refusal text means."""

from __future__ import annotations

import time
from typing import Protocol

import json

from ccab.base.contracts import TOPIC_AGENT_STATUS, TOPIC_ASSIGNMENTS, TOPIC_PREFIX_SETS
from ccab.rollout.prefixset import key as set_key
from ccab.rollout.publish import KafkaUnavailable, Publisher, read_agent_status, read_assignments, read_topic

# why an agent refuses, from its reason text (rollout/agent/agent.go): what to check
REFUSAL_CAUSES = (
    # first: a prefix set's reason may name a chunk's signature, which is not the assignment's
    ("prefix set", "prefix set", "the agents could not fetch or verify the prefix set the assignment/3 names "
                                 "(ccab.prefix_sets.v1, the agents' --prefix-sets-topic): see the reason"),
    ("signature", "bad signature", "the agents' public key does not match `--key` (or $CCAB_ROLLOUT_KEY)"),
    ("not signed", "unsigned", "the records carry no signature (was the controller given a key?)"),
    ("wrong_host", "wrong host", "the plan's host names differ from the agents' --host names"),
    ("unknown congestion control", "unknown cc", "the kernel lacks the arm's cc module (modprobe tcp_<cc>)"),
    ("not available", "cc not available", "the cc module is not loaded on those hosts (modprobe, or --load-modules)"),
    ("bbr version", "bbr version", "the kernel's bbr is another version than the arm's bbr_version"),
    ("generation", "generation jump", "another controller or key published for these hosts"),
    ("too large", "too large", "the record exceeds the agent's size limit"),
)


class Pager(Protocol):
    """Where pages go (Alertmanager API v2): postable alerts, resolved by posting them with endsAt."""

    def fire(self, alerts: list[dict]) -> None: ...
    def resolve(self, alerts: list[dict]) -> None: ...


class Bus(Protocol):
    def publish(self, records: list[dict]) -> int: ...
    def assignments(self) -> list[dict]: ...
    def agent_status(self) -> list[dict]: ...
    # prefix_set/1 chunks (a segment too large for one assignment record)
    def publish_prefix_set(self, records: list[dict]) -> int: ...
    def prefix_sets(self) -> list[dict]: ...


class KafkaBus:
    """The real bus: ccab.rollout.publish on the configured brokers.

    A broker that did not answer is remembered for ``down_for_s`` (per bootstrap, in this process):
    until then every read and publish raises :class:`KafkaUnavailable` at once instead of waiting
    ``timeout_s`` again, so a controller loop over N rollouts waits on a Kafka outage once, not
    several times per rollout, and the breakers (which need only the warehouse) stay on time."""

    _down_until: dict[str, tuple[float, str]] = {}  # bootstrap -> (monotonic deadline, why)

    def __init__(self, bootstrap: str, assignments_topic: str | None = None, status_topic: str | None = None,
                 timeout_s: float = 15.0, prefix_sets_topic: str | None = None, down_for_s: float | None = None):
        self.bootstrap = bootstrap
        self.assignments_topic = assignments_topic or TOPIC_ASSIGNMENTS
        self.status_topic = status_topic or TOPIC_AGENT_STATUS
        self.prefix_sets_topic = prefix_sets_topic or TOPIC_PREFIX_SETS
        self.timeout_s = timeout_s
        self.down_for_s = 2 * timeout_s if down_for_s is None else down_for_s
        self._pub = None
        self._sets_pub = None

    def _call(self, fn, *args):
        down = KafkaBus._down_until.get(self.bootstrap)
        if down is not None and time.monotonic() < down[0]:
            raise KafkaUnavailable(f"{down[1]} (not retried for {self.down_for_s:g} s)")
        try:
            out = fn(*args)
        except KafkaUnavailable as exc:
            KafkaBus._down_until[self.bootstrap] = (time.monotonic() + self.down_for_s, str(exc))
            raise
        KafkaBus._down_until.pop(self.bootstrap, None)
        return out

    def publish(self, records: list[dict]) -> int:
        if self._pub is None:
            self._pub = Publisher(self.bootstrap, self.assignments_topic, self.timeout_s)
        return self._call(self._pub.publish, records)

    def assignments(self) -> list[dict]:
        return self._call(read_assignments, self.bootstrap, self.assignments_topic, self.timeout_s)

    def agent_status(self) -> list[dict]:
        return self._call(read_agent_status, self.bootstrap, self.status_topic, self.timeout_s)

    def publish_prefix_set(self, records: list[dict]) -> int:
        if self._sets_pub is None:
            self._sets_pub = Publisher(self.bootstrap, self.prefix_sets_topic, self.timeout_s)
        return self._call(lambda: self._sets_pub.publish(
            records, key=lambda r: set_key(r["name"], r["version"], r["chunk"])))

    def prefix_sets(self) -> list[dict]:
        out = []
        for _k, v in self._call(read_topic, self.bootstrap, self.prefix_sets_topic, self.timeout_s):
            try:
                rec = json.loads(v) if v else None
            except ValueError:
                continue  # not ours to judge: the agents refuse it if an assignment names it
            if isinstance(rec, dict):
                out.append(rec)
        return out



def refusal_cause(reason: str) -> tuple[str, str]:
    """(short reason, likely cause) of an agent's refusal text."""
    low = (reason or "").lower()
    for needle, short, cause in REFUSAL_CAUSES:
        if needle in low or needle.replace(" ", "_") in low:
            return short, cause
    if "malformed" in low or "parse" in low or "json" in low:
        return "malformed", "the record does not parse as assignment/1 (agent and controller versions differ?)"
    return (reason or "refused")[:60], "see the agents' journal (journalctl -u ccab-agent)"

