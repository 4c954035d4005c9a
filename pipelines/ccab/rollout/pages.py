"""What a page says: the Alertmanager alert of a circuit-breaker trip, and how long a page stays
firing at least."""

from __future__ import annotations

from ccab.judge.alerts.text import times


#: how long a page stays firing at least, even when the arm's hosts are back on control sooner:
#: Alertmanager notifies a group only after its ``group_wait`` and never sends an alert that
#: resolved before that first notification, so a shorter page reaches no one. 60 s = the page
#: route's group_wait in deploy/prometheus/alertmanager.yml (30 s) + 30 s; with another route,
#: `ccab controller run --alertmanager-config FILE` derives it (service.page_min_firing_s).
PAGE_MIN_FIRING_S = 60.0
BAD_ARM = ("halted", "rolled_back")


def breaker_payload(rollout_id: str, t: dict, action: str) -> dict:
    """The Alertmanager alert of one breaker trip: labels route and group (rollout, pop, arm,
    severity, guardrail), annotations say what happened and the next command."""
    ratio = times(t["max_ratio"])
    nxt = (f"ccab rollout status {rollout_id} --audit 20" if action in BAD_ARM else
           f"ccab rollout rollback {rollout_id} --arm {t['arm']} --reason PAGE --alert {t.get('alert_id', '')}")
    return {
        "labels": {"alertname": "CcabCircuitBreaker", "severity": "page", "team": "ccab", "component": "rollout",
                   "rollout": rollout_id, "pop": t["pop"], "arm": t["arm"], "control_arm": t["control_arm"],
                   "guardrail": f"breaker:{t['metric'] if 'metric' in t else 'retrans_pct'}",
                   "alert_id": t.get("alert_id", "")},
        "annotations": {
            "summary": f"circuit breaker: {t['arm']} retransmits {ratio} {t['control_arm']} on {t['pop']}/{rollout_id}",
            "description": (f"{t['arm']} retransmitted {t['treatment_pct']:.2f}% of bytes vs {t['control_pct']:.2f}% on "
                            f"{t['control_arm']} ({ratio} at worst, > {t['ratio']:g}× for {t['minutes']} consecutive "
                            f"minutes from {t['first_minute']} to {t['last_minute']} UTC). The controller "
                            f"{action.replace('_', ' ')} the arm; the page resolves when its hosts are back on "
                            f"control."),
            "estimate": ratio, "runbook": nxt},
        "startsAt": t["first_minute"].replace(" ", "T") + ("" if t["first_minute"].endswith("Z") else "Z"),
    }

