"""What the controller asks of the data, in one object: :class:`Analysis`.

The controller (controller.py) decides; the analysis answers from the warehouse: a look's verdicts
(the judge on the stage's window, with the rollout's pre-period and guardrails), the per-minute
circuit breakers, and the bookkeeping of the alerts that were the evidence (their action, their
Alertmanager payloads, resolving an arm's alerts). The real one is built in one place,
``ccab.pipeline.controller_analysis(plan)``, for the CLI, the service and the lab alike; a test
builds one from plain functions. A part left ``None`` is not available: no ``judge``, no looks
(the service only publishes); no ``breakers``, no breaker checks; no ``known_alerts``, any alert id
is accepted; no ``record_action`` / ``alert_payloads`` / ``arm_done``, no alert bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Optional

# judge(start, end, look, looks_planned) -> verdicts (objects with pop, treatment_arm, control_arm,
# rollout_id, decision, reasons, alert_ids, gates_failed)
JudgeFn = Callable[[datetime, datetime, int, int], list]
# breakers(start, end) -> trips: dicts with pop, arm, control_arm, ratio, minutes, max_ratio,
# treatment_pct, control_pct, first_minute, last_minute, alert_id (per-minute data, no rollups)
BreakerFn = Callable[[datetime, datetime], list]
ActionFn = Callable[[list[str], str], None]  # record_action(alert_ids, "halted" | "rolled_back")
KnownAlertsFn = Callable[[list[str]], set]  # the ids among these that are alerts of this rollout
PayloadsFn = Callable[[list[str]], list[dict]]  # stored alerts -> Alertmanager postable alerts
ArmDoneFn = Callable[[str, str], list[dict]]  # arm_done(arm, state): resolve its alerts, return them (endsAt)
PrefixesFn = Callable[[tuple[str, ...]], list[str]]  # a segment plan's segments -> their prefixes


@dataclass(frozen=True)
class Analysis:
    judge: Optional[JudgeFn] = None
    breakers: Optional[BreakerFn] = None
    record_action: Optional[ActionFn] = None
    known_alerts: Optional[KnownAlertsFn] = None
    alert_payloads: Optional[PayloadsFn] = None
    arm_done: Optional[ArmDoneFn] = None
    segment_prefixes: Optional[PrefixesFn] = None


#: no data at all: a controller that only publishes (``ccab rollout plan``, unit tests)
NO_ANALYSIS = Analysis()
