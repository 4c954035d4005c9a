"""Leader election of controller replicas: a ``flock`` plus a fencing token.

Two (or more) ``ccab controller run`` processes may run against the same
``$CCAB_DATA_DIR/rollouts/``: exactly one drives the rollouts.

- The leader holds an exclusive ``flock`` on ``rollouts/leader.lock``. The kernel releases it when
  the process dies (kill -9 included), so a standby takes over at its next tick.
- On taking the lock the new leader increments the **fencing token** in ``rollouts/leader.json``
  (written atomically). Every state write of the leader carries its token (``Store.fence``) and
  checks it is still the current one (``state.Store.save``): a leader that was paused (SIGSTOP, a
  long GC, a hung NFS) and lost its lock can no longer write after it wakes up, because a newer
  token exists — and a state written by a newer leader (``state.fence`` higher) is never
  overwritten by an older one.
- The per-rollout ``lock`` (``Store.locked``) still serializes the leader with people running
  ``ccab rollout halt/rollback/...`` by hand: both act through the same state files.

The lock works between processes of one machine (or one NFS v4 mount with working locks); for
replicas on several machines put ``$CCAB_DATA_DIR/rollouts`` on such a shared filesystem.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from ccab.base import atomicfile
from ccab.rollout.state import LEADER_FILE, StateError, leader_token, now_ms


class LeaderLock:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.fd: int | None = None
        self.token: int | None = None

    @property
    def is_leader(self) -> bool:
        return self.fd is not None

    def try_acquire(self) -> int | None:
        """Take the lock if free; returns the new fencing token (or the held one), else None."""
        if self.fd is not None:
            return self.token
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "leader.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            token = leader_token(self.root) + 1
        except StateError:
            os.close(fd)  # a leader file it cannot trust: refuse, and keep no lock
            raise
        atomicfile.write_bytes(self.root / LEADER_FILE, (json.dumps(
            {"token": token, "pid": os.getpid(), "host": socket.gethostname(), "since_ms": now_ms()}) + "\n").encode())
        self.fd, self.token = fd, token
        return token

    def still_leader(self) -> bool:
        """True while this process holds the lock and its token is the current one."""
        return self.fd is not None and leader_token(self.root) == self.token

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.token = None, None
