"""The alert record (one row of ``alerts``) and its stable id."""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass

ACTIONS = ("none", "halted", "rolled_back", "promoted")
STATUSES = ("firing", "acknowledged", "resolved")


@dataclass
class Alert:
    alert_id: str
    ts_ms: int
    rollout_id: str
    pop: str
    kind: str
    metric: str
    statistic: str
    segment: str
    treatment_arm: str
    control_arm: str
    direction: str
    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    severity: str
    action: str
    window_start: str
    window_end: str
    summary: str
    description: str
    report_url: str = ""
    first_seen_ms: int = 0
    look: int = 1
    status: str = "firing"

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("estimate", "ci_low", "ci_high", "p_value"):
            if not (isinstance(d[k], float) and math.isfinite(d[k])):
                d[k] = None
        return d


def alert_id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]
