"""The statistical judge: host-clustered comparisons of arms, guardrails, sequential looks,
data-quality gates, circuit breakers, power — and the alerts on-call receives.

Read ``docs/judge/README.md`` for the methods and their validation. Entry point:
:func:`judge_window` (``ccab analyze``, the ``ccab_compare`` DAG, the rollout controller).
"""

from ccab.judge.core import JudgeReport, judge_window
from ccab.judge.model import DEFAULT_BREAKERS, DEFAULT_GUARDRAILS, Breaker, Guardrail, Verdict

__all__ = ["judge_window", "JudgeReport", "Guardrail", "Breaker", "Verdict", "DEFAULT_GUARDRAILS",
           "DEFAULT_BREAKERS"]
