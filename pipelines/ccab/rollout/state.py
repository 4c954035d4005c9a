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
import copy
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

STATE_VERSION = 1


class StateError(RuntimeError):
    pass


def now_ms() -> int:
    return int(time.time() * 1000)


def rollouts_dir(data_dir: Path | None = None) -> Path:
    if data_dir is None:
        from ccab.config import settings

        data_dir = settings().data_dir
    return Path(data_dir) / "rollouts"


def new_state(rollout_id: str, plan_digest: str, plan_path: str) -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "rollout_id": rollout_id,
        "plan_digest": plan_digest,
        "plan_path": plan_path,
        "status": "running",  # running | paused | halted | rolled_back | completed
        "stage": 0,
        "stage_started_ms": None,
        "stage_applied_ms": None,  # when min_applied was first reached for this stage
        "looks_done": 0,
        "arms": {},  # arm -> active | halted | rolled_back | promoted
        "promoted": None,
        "hosts": {},  # host -> {pop, arm, cc, qdisc, generation, status: pending|published, record}
        "intent": None,  # {id, ts_ms, hosts: [...]} while a publish is in flight
        "updated_ms": now_ms(),
    }


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


@dataclass
class Store:
    """The files of one rollout."""

    dir: Path

    @classmethod
    def for_rollout(cls, rollout_id: str, data_dir: Path | None = None) -> "Store":
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

    def load(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            raise StateError(f"no rollout state at {self.state_file} (start the rollout first)") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise StateError(f"cannot read {self.state_file}: {exc}") from None
        if state.get("version") != STATE_VERSION:
            raise StateError(f"{self.state_file}: state version {state.get('version')!r}, expected {STATE_VERSION}")
        return state

    def save(self, state: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        state = copy.deepcopy(state)
        state["updated_ms"] = now_ms()
        write_atomically(self.state_file, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode())

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
    def locked(self) -> Iterator[None]:
        """Exclusive lock: one controller process per rollout at a time (released on exit/crash)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StateError(f"another controller holds {self.dir / 'lock'}") from None
            yield
        finally:
            os.close(fd)
