"""Durable controller state and the append-only audit log, under ``$CCAB_DATA_DIR/rollouts/<id>/``.

Files:
- ``state.json`` — the whole controller state (stage, arm statuses, per-host record and
  generation, a pending publish intent). Rewritten atomically (temp file, fsync, rename, fsync of
  the directory): a crash leaves the old or the new state, never a torn one.
- ``audit.jsonl`` — one JSON object per decision or action, appended and fsynced before the
  action's effect is visible; never rewritten. Each has ``seq``, ``ts_ms``, ``event``, ``actor``
  (``controller`` or ``operator``), ``reason`` and the evidence (judge verdicts, alert ids).
- ``plan.yaml`` — the plan the rollout was started with (its sha256 is ``state.plan_digest``).
- ``lock`` — ``flock``-ed by the one controller process acting on this rollout.

Publishing is crash-safe by write-ahead intent: the signed records (with their generation) are
stored in ``state.json`` as ``pending`` plus an ``intent`` *before* anything is produced; after
the broker acknowledges them they become ``published``. A restart that finds an intent reconciles
it against the compacted topic: a record already there is marked published, one that is not is
produced again **byte for byte** (same generation, same signature) — so no host ever gets two
generations for one change, and an agent that already applied it ignores the repeat.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Literal

from ccab.base import atomicfile
from ccab.base.config import settings
from ccab.base.contracts import rollout_id_problem

STATE_VERSION = 1

RolloutStatus = Literal["running", "paused", "halted", "rolled_back", "completed"]
ArmState = Literal["active", "halted", "rolled_back", "promoted"]
Delivery = Literal["pending", "published"]
TERMINAL: tuple[RolloutStatus, ...] = ("rolled_back", "completed")


class StateError(RuntimeError):
    pass


class LockBusy(StateError):
    """Another process holds the rollout's lock (the controller service in a tick, a person)."""


class FencedOut(StateError):
    """A controller whose leader token is no longer the current one tried to write."""


LEADER_FILE = "leader.json"


#: a fencing token is a whole number in [0, MAX_LEADER_TOKEN] (exact in every JSON reader)
MAX_LEADER_TOKEN = 2**53 - 1


def leader_token(root: Path) -> int:
    """The current leader token under the rollouts directory (0 when no leader ever ran). A file
    that holds anything but ``{"token": N, ...}`` with N a whole number in [0, 2^53-1] is refused
    (``StateError``): taking it as 0 would let the next leader's token go backwards, below the
    ``fence`` of the states a newer leader wrote."""
    path = Path(root) / LEADER_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise StateError(f"cannot read the controller leader file {path}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except ValueError:
        raw = None
    token = raw.get("token") if isinstance(raw, dict) else None
    if type(token) is not int or not 0 <= token <= MAX_LEADER_TOKEN:  # noqa: E721 - bool and float are not tokens
        shown = text.strip()[:60] or "an empty file"
        raise StateError(f"{path}: the fencing token must be a whole number in [0, {MAX_LEADER_TOKEN}], the file "
                         f"holds {shown!r}; put the last good token back (one above every state's \"fence\") or, "
                         f"with no controller running, remove the file")
    return token


def now_ms() -> int:
    return int(time.time() * 1000)


def rollouts_dir(data_dir: Path | None = None) -> Path:
    return Path(data_dir if data_dir is not None else settings().data_dir) / "rollouts"


@dataclass
class HostAssignment:
    """What the controller last sent one host: the signed record and whether it reached Kafka."""

    pop: str
    arm: str
    cc: str
    qdisc: str | None
    generation: int
    status: Delivery
    record: dict[str, Any]


@dataclass
class PublishIntent:
    """A publish in flight (write-ahead): the hosts whose records are pending."""

    id: str
    ts_ms: int
    hosts: list[str]


@dataclass
class RolloutState:
    """The whole controller state of one rollout (``state.json``)."""

    rollout_id: str
    plan_digest: str
    plan_path: str
    status: RolloutStatus = "running"
    stage: int = 0
    seed: int | None = None
    started_ms: int | None = None
    stage_started_ms: int | None = None
    stage_applied_ms: int | None = None  # when min_applied was first reached for this stage
    looks_done: int = 0
    arms: dict[str, ArmState] = field(default_factory=dict)
    promoted: str | None = None
    hosts: dict[str, HostAssignment] = field(default_factory=dict)
    intent: PublishIntent | None = None
    last_look_ms: int | None = None  # when the last look (judge run) of the current stage ran
    breaker_checked_ms: int | None = None  # when the per-minute breakers were last evaluated
    pages: dict[str, list[dict]] = field(default_factory=dict)  # arm -> alerts sent to Alertmanager, open
    pages_fired_ms: dict[str, int] = field(default_factory=dict)  # arm -> when its open pages first fired
    fence: int = 0  # the leader token of the controller that last wrote this state (fencing)
    taken_over: list[str] = field(default_factory=list)  # `start --take-over X`: X's hosts may be taken
    updated_ms: int = 0
    version: int = STATE_VERSION

    def published_hosts(self) -> int:
        return sum(1 for v in self.hosts.values() if v.status == "published")

    def generation_of(self, host: str) -> int:
        h = self.hosts.get(host)
        return h.generation if h else 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any], source: str = "state") -> "RolloutState":
        try:
            known = {f.name for f in fields(cls)}
            data = {k: v for k, v in raw.items() if k in known}
            data["hosts"] = {h: HostAssignment(**v) for h, v in (raw.get("hosts") or {}).items()}
            data["intent"] = PublishIntent(**raw["intent"]) if raw.get("intent") else None
            return cls(**data)
        except (TypeError, KeyError, AttributeError) as exc:
            raise StateError(f"{source}: not a rollout state ({exc})") from None


@dataclass
class Store:
    """The files of one rollout. ``fence`` is set by a controller service that holds the leader
    lock (:mod:`ccab.rollout.leader`): every save then checks that no newer leader took over."""

    dir: Path
    fence: int | None = None

    @classmethod
    def for_rollout(cls, rollout_id: str, data_dir: Path | None = None) -> "Store":
        """The rollout's directory; ``StateError`` for an id that is not one path component
        (``..``, ``.``, slashes, NUL): nothing is ever written into the data dir itself or outside it."""
        problem = rollout_id_problem(rollout_id)
        if problem:
            raise StateError(f"rollout id {rollout_id!r:.80}: {problem}")
        return cls(rollouts_dir(data_dir) / rollout_id)

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def audit_file(self) -> Path:
        return self.dir / "audit.jsonl"

    @property
    def plan_file(self) -> Path:
        return self.dir / "plan.yaml"

    def exists(self) -> bool:
        return self.state_file.exists()

    def load(self) -> RolloutState:
        try:
            state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            raise StateError(f"no rollout state at {self.state_file} (start the rollout first)") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise StateError(f"cannot read {self.state_file}: {exc}") from None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            version = state.get("version") if isinstance(state, dict) else None
            raise StateError(f"{self.state_file}: state version {version!r}, expected {STATE_VERSION}")
        return RolloutState.from_json(state, str(self.state_file))

    def save(self, state: RolloutState) -> None:
        if self.fence is not None:
            current = leader_token(self.dir.parent)
            if current != self.fence or state.fence > self.fence:
                raise FencedOut(f"fenced out: controller leader token {self.fence} is stale (current "
                                f"{max(current, state.fence)}); another controller took over, this one stops")
            state.fence = self.fence
        state.updated_ms = now_ms()
        atomicfile.write_bytes(self.state_file, (json.dumps(state.to_json(), indent=1, sort_keys=True) + "\n").encode())

    def audit(self, event: str, reason: str = "", actor: str = "controller", **details: Any) -> dict:
        """Append one entry (fsynced) and return it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        seq = sum(1 for _ in self.read_audit()) + 1
        entry = {"seq": seq, "ts_ms": now_ms(), "event": event, "actor": actor, "reason": reason, **details}
        line = json.dumps(entry, sort_keys=True, default=str) + "\n"
        with open(self.audit_file, "a+b") as f:
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a torn last line from a crash: end it, keep it skippable
                    line = "\n" + line
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())
        return entry

    def read_audit(self) -> Iterator[dict]:
        try:
            with open(self.audit_file, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError:  # a torn last line after a crash: skip it
                        continue
        except FileNotFoundError:
            return

    @contextlib.contextmanager
    def locked(self, wait_s: float = 0.0) -> Iterator[None]:
        """Exclusive lock: one controller process per rollout at a time (released on exit/crash).
        ``wait_s``: how long to wait for a holder to finish (a person's command waits out the
        service's tick of this rollout; the service itself never waits), then :class:`LockBusy`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockBusy(f"another controller holds {self.dir / 'lock'}"
                                       + (f" (waited {wait_s:.0f} s)" if wait_s else "")) from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    # ---- operators' requests: a halt/rollback recorded while the rollout's lock is busy
    @property
    def requests_dir(self) -> Path:
        return self.dir / "requests"

    def add_request(self, action: str, **args: Any) -> dict:
        """Record an operator's ``action`` (``halt``/``rollback`` with its arguments) for the
        controller that holds the rollout to apply at its next tick (:meth:`requests`). Durable
        (atomic write) before this returns."""
        req = {"id": uuid.uuid4().hex[:12], "ts_ms": now_ms(), "action": action, "args": args}
        self.requests_dir.mkdir(parents=True, exist_ok=True)
        atomicfile.write_bytes(self.requests_dir / f"{req['ts_ms']:015d}-{req['id']}.json",
                               (json.dumps(req, sort_keys=True) + "\n").encode())
        return req

    def requests(self) -> list[tuple[Path, dict]]:
        """The recorded requests, oldest first (an unreadable file is skipped, left for a person)."""
        out = []
        for p in sorted(self.requests_dir.glob("*.json")) if self.requests_dir.is_dir() else []:
            try:
                out.append((p, json.loads(p.read_text())))
            except (OSError, ValueError):
                continue
        return out
