"""ccab.alerting.alertmanager against the real Alertmanager (Debian's binary, started per test by
alertmanager_fixture): what on-call sees after ccab posts, resolves and silences alerts."""

from __future__ import annotations

import socket
import threading
from datetime import datetime, timedelta, timezone

import pytest

from alertmanager_fixture import wait_until
from ccab.alerting import (
    AlertmanagerError,
    create_silence,
    expire_silence,
    list_alert_groups,
    list_alerts,
    list_silences,
    post_alerts,
    resolve,
)


def _alert(rollout="tyo1-bbr-canary", pop="tyo1", arm="bbr2", alertname="CcabRolloutBreakerNotActedOn", **extra):
    a = {
        "labels": {"alertname": alertname, "severity": "page", "component": "rollout", "team": "ccab",
                   "rollout": rollout, "pop": pop, "arm": arm},
        "annotations": {"summary": f"Rollout {rollout}: circuit breaker tripped on {arm} in {pop}",
                        "runbook": f"ccab rollout status {rollout}"},
        "startsAt": datetime.now(timezone.utc) - timedelta(minutes=1),
        "generatorURL": f"ccab://rollouts/{rollout}",
    }
    a.update(extra)
    return a


def _find(url, labels, **kw):
    """The alerts Alertmanager lists whose labels are exactly ``labels``."""
    return [a for a in list_alerts(url, {"rollout": labels["rollout"]}, **kw) if a["labels"] == labels]


def test_a_posted_alert_arrives_with_its_labels_and_annotations(alertmanager):
    alert = _alert()
    assert post_alerts(alertmanager.url, [alert]) == 1

    got = wait_until(lambda: _find(alertmanager.url, alert["labels"]), what="the posted alert in GET /api/v2/alerts")
    assert len(got) == 1
    a = got[0]
    assert a["labels"] == alert["labels"]
    assert a["annotations"] == alert["annotations"]
    assert a["generatorURL"] == "ccab://rollouts/tyo1-bbr-canary"
    assert a["status"]["state"] == "active"
    assert [r["name"] for r in a["receivers"]] == ["test-sink"]
    # filters narrow the list
    assert list_alerts(alertmanager.url, {"rollout": "another-rollout"}) == []
    assert [x["labels"]["arm"] for x in list_alerts(alertmanager.url, ['arm=~"bbr.*"', 'pop="tyo1"'])] == ["bbr2"]


def test_alerts_group_by_rollout_pop_and_arm(alertmanager):
    same_arm = [_alert(alertname="CcabRolloutBreakerNotActedOn"), _alert(alertname="CcabRolloutAgentRefusals")]
    other_arm = [_alert(arm="bbr1", alertname="CcabRolloutArmStopped")]
    post_alerts(alertmanager.url, same_arm + other_arm)

    def groups():
        gs = list_alert_groups(alertmanager.url, {"rollout": "tyo1-bbr-canary"})
        return gs if sum(len(g["alerts"]) for g in gs) == 3 else None

    gs = wait_until(groups, what="3 alerts in their groups")
    by_labels = {tuple(sorted(g["labels"].items())): g for g in gs}
    bbr2 = by_labels[(("arm", "bbr2"), ("pop", "tyo1"), ("rollout", "tyo1-bbr-canary"))]
    bbr1 = by_labels[(("arm", "bbr1"), ("pop", "tyo1"), ("rollout", "tyo1-bbr-canary"))]
    assert len(by_labels) == 2
    assert sorted(a["labels"]["alertname"] for a in bbr2["alerts"]) == ["CcabRolloutAgentRefusals",
                                                                        "CcabRolloutBreakerNotActedOn"]
    assert [a["labels"]["alertname"] for a in bbr1["alerts"]] == ["CcabRolloutArmStopped"]
    assert bbr2["receiver"]["name"] == "test-sink"
    # every grouping label is on every alert of the group
    for g in gs:
        for a in g["alerts"]:
            assert {k: a["labels"][k] for k in ("rollout", "pop", "arm")} == g["labels"]


def test_resolve_sets_ends_at_and_the_alert_is_no_longer_active(alertmanager):
    alert = _alert(rollout="resolve-me")
    post_alerts(alertmanager.url, [alert])
    wait_until(lambda: _find(alertmanager.url, alert["labels"]), what="the alert to arrive")

    assert resolve(alertmanager.url, [alert]) == 1

    wait_until(lambda: _find(alertmanager.url, alert["labels"]) == [], what="the resolved alert to leave the active list")
    assert list_alert_groups(alertmanager.url, {"rollout": "resolve-me"}) == []
    # an alert fetched from the API can be resolved as it is (read-only fields are dropped)
    again = _alert(rollout="resolve-me", arm="bbr1")
    post_alerts(alertmanager.url, [again])
    fetched = wait_until(lambda: _find(alertmanager.url, again["labels"]), what="the second alert")
    resolve(alertmanager.url, fetched)
    wait_until(lambda: _find(alertmanager.url, again["labels"]) == [], what="the fetched alert to be resolved")


def test_a_silence_matching_the_labels_suppresses_the_alert(alertmanager):
    alert = _alert(rollout="silence-me")
    post_alerts(alertmanager.url, [alert])
    wait_until(lambda: _find(alertmanager.url, alert["labels"]), what="the alert to arrive")

    sid = create_silence(alertmanager.url, {"rollout": "silence-me", "arm": "bbr2"}, created_by="ccab tests",
                         comment="planned maintenance of tyo1", duration_s=600)

    silences = {s["id"]: s for s in list_silences(alertmanager.url)}
    assert silences[sid]["status"]["state"] == "active"
    assert silences[sid]["createdBy"] == "ccab tests"
    assert {(m["name"], m["value"], m["isRegex"]) for m in silences[sid]["matchers"]} == {
        ("rollout", "silence-me", False), ("arm", "bbr2", False)}
    assert [s["id"] for s in list_silences(alertmanager.url, {"rollout": "silence-me"})] == [sid]

    def suppressed():
        got = _find(alertmanager.url, alert["labels"])
        return got if got and got[0]["status"]["state"] == "suppressed" else None

    a = wait_until(suppressed, what="status.state == suppressed")[0]
    assert a["status"]["silencedBy"] == [sid]
    assert _find(alertmanager.url, alert["labels"], silenced=False) == []

    # a silence that does not match leaves other alerts alone
    other = _alert(rollout="silence-me", arm="bbr1")
    post_alerts(alertmanager.url, [other])
    assert wait_until(lambda: _find(alertmanager.url, other["labels"]), what="the other alert")[0]["status"]["state"] == "active"

    expire_silence(alertmanager.url, sid)
    wait_until(lambda: [x for x in _find(alertmanager.url, alert["labels"]) if x["status"]["state"] == "active"],
               what="the alert to be active again once its silence expired")


def test_alertmanager_refusals_name_the_url_the_operation_and_the_answer(alertmanager):
    now = datetime.now(timezone.utc)
    bad = _alert(startsAt=now, endsAt=now - timedelta(hours=1))  # ends before it starts
    with pytest.raises(AlertmanagerError) as err:
        post_alerts(alertmanager.url, [bad])
    e = err.value
    assert e.status == 400
    assert e.url == alertmanager.url + "/api/v2/alerts"
    assert alertmanager.url in str(e) and "posting 1 alert(s)" in str(e) and "HTTP 400" in str(e)
    assert "start" in e.detail.lower()  # Alertmanager's own words about the times


def test_unreachable_and_silent_alertmanagers_raise_named_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: connection refused
        with pytest.raises(AlertmanagerError) as err:
            list_alerts(dead)
    assert err.value.status is None
    assert f"Alertmanager {dead}/api/v2/alerts: listing alerts failed: unreachable" in str(err.value)

    # a server that accepts the connection and never answers
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    accepted = []
    t = threading.Thread(target=lambda: accepted.append(srv.accept()), daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/"
        with pytest.raises(AlertmanagerError) as err:
            create_silence(url, {"rollout": "r1"}, created_by="t", comment="c", timeout=0.5)
        assert "creating a silence for rollout=\"r1\" failed: no answer within 0.5 s" in str(err.value)
    finally:
        t.join(timeout=5)
        for conn, _ in accepted:
            conn.close()
        srv.close()


def test_malformed_input_is_refused_before_anything_is_sent():
    url = "http://127.0.0.1:9"  # never contacted
    with pytest.raises(ValueError, match="alert 0: unknown field"):
        post_alerts(url, [{"labels": {"alertname": "X"}, "starts_at": "2026-01-01T00:00:00Z"}])
    with pytest.raises(ValueError, match="labels are required"):
        post_alerts(url, [{"annotations": {"summary": "no labels"}}])
    with pytest.raises(ValueError, match="not a valid label name"):
        post_alerts(url, [{"labels": {"bad-name": "x"}}])
    with pytest.raises(ValueError, match="has no timezone"):
        post_alerts(url, [{"labels": {"alertname": "X"}, "startsAt": datetime(2026, 1, 1)}])
    with pytest.raises(ValueError, match="created_by and comment"):
        create_silence(url, {"rollout": "r1"}, created_by="", comment="")
    with pytest.raises(ValueError, match="at least one matcher"):
        create_silence(url, {}, created_by="t", comment="c")
    with pytest.raises(ValueError, match="expected http"):
        list_alerts("127.0.0.1:9093")
    assert post_alerts(url, []) == 0
