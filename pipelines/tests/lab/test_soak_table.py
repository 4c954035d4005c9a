"""The soak test's table (issue 28 item 4): rows and goals from counts, no processes. The soak
itself (scripts/soak.sh) is not a pytest; these check its arithmetic and the exit rule."""

from __future__ import annotations

from ccab_workshop.lab import soak_table as T
from ccab_workshop.lab.soak import alertmanager_config, chaos_schedule

MIN = 60_000


def test_records_lost_and_duplicated_per_topic():
    ok = T.Records("ccab.tcp.v1", produced=100, stored_rows=96, stored_distinct=96, dead_letters=4)
    assert (ok.lost, ok.duplicated) == (0, 0)
    assert T.records_row([ok])[3]
    lossy = T.Records("ccab.http.v1", produced=100, stored_rows=99, stored_distinct=97, dead_letters=1)
    assert (lossy.lost, lossy.duplicated) == (2, 2)
    what, measured, goal, met = T.records_row([ok, lossy])
    assert not met and "lost 2, duplicated 2" in measured and "200 produced" in measured


def test_breakers_every_minute_on_time():
    checks = [10_000 + i * 70_000 for i in range(10)]  # every 70 s: within 60 s + 2 x 15 s
    assert T.breaker_slots(checks, [], 0, checks[-1] + 30_000, 90) == (10, 10, 0, 0)
    assert T.breakers_row(10, 10, 0)[3]


def test_a_gap_skips_evaluations_and_a_failed_attempt_fills_no_slot():
    checks = [60_000, 120_000, 420_000]  # 300 s without an evaluation: 3 skipped at a 90 s limit
    assert T.breaker_slots(checks, [], 0, 430_000, 90) == (6, 2, 3, 0)
    # failed at 120 s, the next successful one only at 180 s (the once-a-minute clock): one skipped
    assert T.breaker_slots([60_000, 180_000], [120_000], 0, 200_000, 90) == (3, 1, 1, 1)
    # failed, retried at the next loop and in time: on time, the failed attempt counted
    assert T.breaker_slots([60_000, 135_000], [120_000], 0, 150_000, 90) == (2, 2, 0, 1)
    assert not T.breakers_row(3, 1, 1, 1)[3]
    # a silent tail after the last evaluation while the rollout still ran is skipped too
    assert T.breaker_slots([60_000], [], 0, 400_000, 90)[2] == 3


def test_looks_due_done_and_missed():
    assert T.look_slots(0, [10 * MIN + 20_000], [], 15 * MIN, 10 * MIN, 90) == (1, 1)
    assert T.look_slots(0, [10 * MIN + 200_000], [], 15 * MIN, 10 * MIN, 90) == (1, 0)  # late
    assert T.look_slots(0, [], [10 * MIN], 14 * MIN, 10 * MIN, 90) == (2, 0)  # failed, then none in time
    assert T.look_slots(0, [], [], 20 * MIN, 10 * MIN, 90) == (1, 0)  # due, never run
    assert T.look_slots(0, [], [], 5 * MIN, 10 * MIN, 90) == (0, 0)  # not due yet when it stopped
    assert T.look_slots(None, [], [], 20 * MIN, 10 * MIN, 90) == (0, 0)
    # the controller's window starts at the first whole minute after the hosts applied: applied at
    # 0:02, the look is due at 11:00, and one at 11:44 is on time (the soak of 18:43 counted it late)
    assert T.look_slots(2_000, [11 * MIN + 44_000], [], 15 * MIN, 10 * MIN, 90) == (1, 1)


def test_analyst_lock_errors_miss_the_goal():
    assert T.analyst_row({"run": 10, "answered": 10})[3]
    assert not T.analyst_row({"run": 10, "answered": 9, "lock": 1})[3]
    assert not T.analyst_row({"run": 10, "answered": 9, "down": 1})[3]
    assert not T.analyst_row({"run": 0, "answered": 0})[3]


def test_hosts_rollback_page_promotion_rows():
    assert T.hosts_row({"a1": "cubic", "b1": "bbr"}, {"a1": "cubic", "b1": "bbr"})[3]
    row = T.hosts_row({"a1": "bbr", "b1": "bbr"}, {"a1": "cubic", "b1": "bbr"})
    assert not row[3] and "a1 reads bbr believed cubic" in row[1]
    assert T.rollback_row(6.9, 5)[3] and not T.rollback_row(7.1, 5)[3] and not T.rollback_row(None, 5)[3]
    assert T.page_row(["firing", "resolved"])[3]
    assert not T.page_row(["resolved"])[3] and not T.page_row(["firing"])[3] and not T.page_row([])[3]
    assert T.promoted_row("bbr", {"b1": "bbr", "b2": "bbr"}, "bbr")[3]
    assert not T.promoted_row("bbr", {"b1": "bbr", "b2": "cubic"}, "bbr")[3]
    assert not T.promoted_row(None, {"b1": "bbr"}, "bbr")[3]


def test_render_one_table_and_the_exit_rule():
    rows = [T.rollback_row(5.5, 5), T.page_row(["firing", "resolved"])]
    text = T.render(rows)
    lines = text.splitlines()
    assert lines[0].split()[0] == "what" and lines[1].startswith("---") and len(lines) == 4
    assert T.all_met(rows)
    assert not T.all_met(rows + [T.page_row([])])
    assert "MISSED" in T.render(rows + [T.page_row([])])
    assert not T.all_met([])


def test_chaos_schedule_is_seeded_and_covers_every_action():
    a = chaos_schedule(28, 45, 1740, 180, 5)
    assert a == chaos_schedule(28, 45, 1740, 180, 5) and a != chaos_schedule(29, 45, 1740, 180, 5)
    actions = [act for _, act in a]
    for svc in ("loader", "controller", "warehouse", "hourly", "collector", "agent"):
        assert actions.count(f"kill:{svc}") == 2
    for act in ("kafka-outage", "restart:warehouse", "hostile", "second-deployment", "stale-state"):
        assert act in actions
    times = [t for t, _ in a]
    assert times == sorted(times) and all(b - x >= 20 for x, b in zip(times, times[1:]))
    stale = next(t for t, act in a if act == "stale-state")
    assert stale >= 180 + 7 * 60  # after the faulty rollout's expected rollback


def test_alertmanager_config_routes_pages_to_the_receiver():
    import yaml
    cfg = yaml.safe_load(alertmanager_config(4242))
    page = next(r for r in cfg["receivers"] if r["name"] == "ccab-page")
    assert page["webhook_configs"][0]["url"] == "http://127.0.0.1:4242/page"
    assert page["webhook_configs"][0]["send_resolved"] is True
    assert cfg["route"]["routes"][0]["group_wait"] == "30s"  # the shipped route, not a shortened one


def test_late_breakers_names_each_gap_over_the_limit():
    checks = [60_000, 120_000, 300_000, 360_000]
    assert T.late_breakers(checks, 0, 400_000, 90) == [(120_000, 300_000)]
    assert T.late_breakers(checks, 0, 500_000, 90) == [(120_000, 300_000), (360_000, 500_000)]  # still running
    assert T.late_breakers([], 0, 100_000, 90) == [(0, 100_000)]
