"""What the judge is asked (guardrails, breakers) and what it answers (results, verdicts)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal

from ccab.base.vocabulary import (HIGHER_IS_WORSE, JUDGED_METRICS, NETWORK_SEGMENT_FAMILIES, QUANTILES, SEVERITIES,
                                  SHARE_ABOVE, Severity, check_statistic, statistics_of)

__all__ = ["HIGHER_IS_WORSE", "JUDGED_METRICS", "QUANTILES", "SEVERITIES", "SHARE_ABOVE", "Severity",
           "check_statistic", "statistics_of", "Decision", "Guardrail", "Breaker", "RolloutOptions", "DEFAULT_PRE_PERIOD_HOURS", "MIN_PRE_PERIOD_HOURS", "Result",
           "GateCheck", "BreakerTrip", "Verdict", "RolloutJudgement", "DEFAULT_GUARDRAILS", "DEFAULT_BREAKERS"]

Decision = Literal["rollback", "halt", "continue", "pass", "no_decision", "inconclusive_by_design"]


#: segment families a guardrail may be restricted to (all pre-treatment)
GUARDRAIL_SEGMENT_FAMILIES: tuple[str, ...] = ("rtt:", "size:", "bulk") + NETWORK_SEGMENT_FAMILIES


@dataclass(frozen=True)
class Guardrail:
    """A declared guardrail: ``metric``'s ``statistic`` may get at most ``margin`` worse (relative,
    in the metric's harmful direction: 0.05 = 5 % worse is tolerated).

    Tested one-sided against the margin at every look, with the look's spent alpha:
    *regression* when the whole interval is beyond the margin (p < α_k for "worse than margin"),
    *non-inferior* when the interval's harmful end is within the margin.
    """

    metric: str
    statistic: str
    margin: float
    severity: Severity = "page"
    #: judge the guardrail on one pre-treatment segment only ('access:mobile': "BBR must not add
    #: queueing delay on mobile"); 'all' = the whole cohort
    segment: str = "all"

    # ``share_above:50`` is compared on the absolute scale (shares of rare events are often 0 in
    # control): its margin is in share units, 0.002 = 0.2 percentage points of connections.

    def __post_init__(self):
        check_statistic(self.metric, self.statistic)
        if not (isinstance(self.margin, (int, float)) and 0 <= self.margin < 100 and math.isfinite(self.margin)):
            raise ValueError(f"guardrail {self.metric} {self.statistic}: margin must be a number in [0, 100), "
                             f"got {self.margin!r}")
        if self.statistic == SHARE_ABOVE and self.margin >= 1:
            raise ValueError(f"guardrail {self.metric} {self.statistic}: the margin of a share is absolute "
                             f"(0.002 = 0.2 percentage points) and must be < 1, got {self.margin}")
        if not self.higher_is_worse and self.margin >= 1:
            raise ValueError(f"guardrail {self.metric} {self.statistic}: a lower-is-worse metric cannot get "
                             f"more than 100% worse; margin must be < 1, got {self.margin}")
        if self.segment != "all" and not self.segment.startswith(GUARDRAIL_SEGMENT_FAMILIES):
            raise ValueError(f"guardrail {self.metric} {self.statistic}: segment must be 'all' or start with "
                             f"{', '.join(GUARDRAIL_SEGMENT_FAMILIES)}, got {self.segment!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"guardrail {self.metric} {self.statistic}: severity must be one of "
                             f"{', '.join(SEVERITIES)}, got {self.severity!r}")

    @property
    def higher_is_worse(self) -> bool:
        return HIGHER_IS_WORSE[self.metric]

    @property
    def null_ratio(self) -> float:
        """treatment/control ratio at the margin (the boundary of 'tolerated')."""
        return 1 + self.margin if self.higher_is_worse else 1 - self.margin

    @property
    def label(self) -> str:
        sign = "+" if self.higher_is_worse else "-"
        m = f"{100 * self.margin:.2f} pp" if self.statistic == SHARE_ABOVE else f"{self.margin:.0%}"
        where = "" if self.segment == "all" else f" on {self.segment}"
        return f"{self.metric} {self.statistic}{where} (margin {sign}{m}, {self.severity})"


#: metrics a circuit breaker can watch (per-minute sums in tcp_samples)
BREAKER_METRICS: tuple[str, ...] = ("retrans_pct",)


@dataclass(frozen=True)
class Breaker:
    """Deterministic circuit breaker, no statistics: trips when the treatment arm's retransmitted
    share of bytes exceeds ``ratio`` × the control arm's for ``minutes`` consecutive minutes
    (minutes with at least ``min_samples`` samples in both arms)."""

    metric: str = "retrans_pct"
    ratio: float = 3.0
    minutes: int = 10
    min_samples: int = 50

    def __post_init__(self):
        if self.metric not in BREAKER_METRICS:
            raise ValueError(f"breaker metric {self.metric!r}: only {', '.join(BREAKER_METRICS)} breakers exist")
        if not self.ratio > 1 or self.minutes < 1:
            raise ValueError(f"breaker: ratio must be > 1 and minutes >= 1, got ratio={self.ratio}, "
                             f"minutes={self.minutes}")


#: used when neither the caller nor a rollout plan declares guardrails
DEFAULT_GUARDRAILS: tuple[Guardrail, ...] = (
    Guardrail("retrans_pct", "ratio", 0.25, "page"),
    Guardrail("retrans_pct", SHARE_ABOVE, 0.002, "ticket"),   # +0.2 pp of connections above 50 %
    Guardrail("goodput_bps", "p10", 0.05, "page"),
    Guardrail("goodput_bps", "p50", 0.05, "ticket"),
    Guardrail("rtt_us", "p50", 0.10, "ticket"),
)
DEFAULT_BREAKERS: tuple[Breaker, ...] = (Breaker(),)


#: the pre-period the judge adjusts with: the same hosts' data this many hours before the rollout
DEFAULT_PRE_PERIOD_HOURS = 168
MIN_PRE_PERIOD_HOURS = 24


@dataclass(frozen=True)
class RolloutOptions:
    """What a rollout declared for its judge (its plan): control arm, guardrails, breakers; ``note``
    says why a declared plan could not be used (the judge then uses its defaults and says so)."""

    control_arm: str | None = None
    guardrails: tuple[Guardrail, ...] | None = None
    breakers: tuple[Breaker, ...] | None = None
    note: str = ""
    #: the pre-period: this many hours before the rollout's first assignment (>= 24)
    pre_period_hours: int = DEFAULT_PRE_PERIOD_HOURS
    #: the judge refuses to decide (no_decision with this reason), e.g. a design it cannot analyse
    refuse: str = ""
    #: a segment rollout's client segment (``access:mobile``; several = their union): each
    #: guardrail is judged on the segment's connections and, for an access segment, on every other
    #: access segment present (the rest: did the non-targeted clients change?)
    segment: tuple[str, ...] | None = None
    #: (arm, cc) pairs: the algorithm each treatment arm gives the segment's connections (the
    #: ``segment_applied`` gate)
    segment_cc: tuple[tuple[str, str], ...] = ()


@dataclass
class Result:
    """One row of ``judge_results``."""

    treatment_arm: str
    control_arm: str
    metric: str
    statistic: str
    segment: str
    role: str
    method: str
    hosts_treatment: int
    hosts_control: int
    value_treatment: float
    value_control: float
    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    min_attainable_p: float
    severity: str = "info"
    outcome: str = ""
    q_value: float | None = None
    alpha_look: float | None = None
    margin: float | None = None
    error: str = ""
    adjustment: str = ""  # pre-period adjustment: "cuped θ=…", "off (why): unadjusted", "" (none asked)
    variance_reduction: float = math.nan  # 1 − Var(adjusted)/Var(unadjusted), host-level estimate

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class GateCheck:
    """One row of ``judge_gates``."""

    gate: str
    arm: str
    host: str
    status: str  # pass | fail | skipped
    value: float
    threshold: float
    detail: str


@dataclass
class BreakerTrip:
    treatment_arm: str
    control_arm: str
    breaker: Breaker
    first_minute: str
    last_minute: str
    minutes: int
    max_ratio: float
    treatment_pct: float
    control_pct: float


@dataclass
class Verdict:
    pop: str
    rollout_id: str
    treatment_arm: str
    control_arm: str
    decision: str
    reasons: list[str] = field(default_factory=list)
    alert_ids: list[str] = field(default_factory=list)
    gates_failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class RolloutJudgement:
    """Everything the judge found for one (pop, rollout) in a window."""

    pop: str
    rollout_id: str
    control_arm: str
    verdicts: list[Verdict] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    gates: list[GateCheck] = field(default_factory=list)
    trips: list[BreakerTrip] = field(default_factory=list)
    alerts: list = field(default_factory=list)  # ccab.judge.alerts.model.Alert
    error: str = ""
