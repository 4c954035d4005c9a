"""The live canary's pure parts (the run itself is root and ~30 min: ``scripts/live-canary.sh``,
output in docs/rollout/live-canary.md): its plan can promote, and the page's life as printed."""

from __future__ import annotations

from ccab.judge.stats import min_attainable_p
from ccab_workshop.lab.canary import HOSTS, _plan, page_life
from ccab.rollout.plan import plan_from_dict


def test_the_canary_plan_has_hosts_enough_to_pass_and_a_minute_look():
    plan = plan_from_dict(_plan("lc", {h: f"lc-{h}" for h in HOSTS}, breaker_minutes=5, look_minutes=10))
    (stage,) = plan.stages
    assert stage.min_duration_minutes == 10 and stage.looks == 1
    treated = stage.hosts
    control = len(HOSTS) - treated
    # a host-permutation test on these arms can reach the judge's alpha: a pass is possible
    assert min_attainable_p(treated, control, "greater") <= 0.05
    assert [b.minutes for b in plan.breakers] == [5]


def test_the_page_life_names_created_firing_and_resolved_with_times():
    p = {"paged_at": 100.0, "fired_at": 101.0, "startsAt": "2026-11-26T15:30:00Z", "updatedAt": "x",
         "states": [[101.0, "unprocessed"], [102.0, "active"]], "resolved_sent_at": 160.0, "resolved_at": 161.0}
    lines = page_life(p)
    assert lines[0].startswith("created: posted by the controller 00:01:40") and "00:01:41" in lines[0]
    assert lines[1] == "unprocessed: state unprocessed from 00:01:41 to 00:01:42"
    assert lines[2] == "firing: state active from 00:01:42 to 00:02:41"
    assert lines[3].startswith("resolved: endsAt sent 00:02:40") and "(open 1.0 min in Alertmanager)" in lines[3]
