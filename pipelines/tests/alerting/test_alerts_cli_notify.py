"""`ccab alerts` as on-call runs it (issue 29), against the real Alertmanager and a real socket:
--notify says which alerts went out already resolved, a peer that drops the connection is one line
(not "unexpected error: RemoteDisconnected"), an alert from a window before the rollout started is
not listed under the rollout, and --help names every action, promoted included."""

from __future__ import annotations

import socket
import threading
from datetime import datetime, timezone

import pytest
from alertmanager_fixture import alertmanager, alertmanager_factory, wait_until  # noqa: F401
from ccab import cli
from ccab.alerting import list_alerts
from ccab.base.warehouse import connect
from ccab.judge.alerts.model import Alert
from ccab.judge.alerts.store import write_alerts

START_MS = int(datetime(2025, 11, 21, 0, tzinfo=timezone.utc).timestamp() * 1000)


def _alert(aid: str, arm: str, window: tuple[str, str], **kw) -> Alert:
    return Alert(aid, START_MS + 7_200_000, "r1", "tyo1", "guardrail", "retrans_pct", "ratio", "all", arm, "control",
                 "regression", 0.8, 0.5, 1.1, 0.001, "page", kw.pop("action", "none"), window[0], window[1],
                 f"{arm} regressed retrans_pct ratio by +80.0% vs control on tyo1", "details",
                 first_seen_ms=START_MS + 7_200_000, **kw)


@pytest.fixture
def warehouse_with_alerts(warehouse_env, capsys):
    assert cli.main(["db", "migrate"]) == 0
    wh = connect()
    try:
        wh.command("INSERT INTO assignments (rollout_id, generation, pop, host, arm, cc, issued_at_ms) "
                   "VALUES ('r1', 1, 'tyo1', 'h1', 'bbr1', 'bbr', {t:Int64})", params={"t": START_MS})
        in_rollout = ("2025-11-21 00:00:00", "2025-11-21 02:00:00")
        write_alerts(wh, [_alert("a-firing", "bbr2", in_rollout),
                          _alert("a-acted", "bbr1", in_rollout, action="rolled_back", status="resolved"),
                          _alert("a-before", "bbr3", ("2025-11-20 20:00:00", "2025-11-20 23:00:00"))], seq=1)
    finally:
        wh.close()
    capsys.readouterr()


def test_a_pre_rollout_page_is_not_listed_under_the_rollout(warehouse_with_alerts, capsys):
    assert cli.main(["alerts", "--rollout", "r1"]) == 0
    out = capsys.readouterr().out
    assert "bbr2 regressed" in out and "bbr1 regressed" in out
    assert "bbr3" not in out, out
    assert "1 alert(s) from windows that ended before their rollout's first assignment not shown" in out


def test_notify_says_which_alerts_went_out_resolved(warehouse_with_alerts, alertmanager, capsys):
    assert cli.main(["alerts", "--rollout", "r1", "--notify", alertmanager.url + "/api/v2/alerts"]) == 0
    err = capsys.readouterr().err
    assert f"sent 2 alert(s) to {alertmanager.url}/api/v2/alerts, 1 of them as resolved" in err, err
    active = wait_until(lambda: [a for a in list_alerts(alertmanager.url, {"rollout": "r1"})], what="the firing alert")
    assert [a["labels"]["arm"] for a in active] == ["bbr2"]  # the acted-on one arrived resolved


def test_a_peer_dropping_the_connection_is_one_line(warehouse_with_alerts, capsys):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def drop():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.recv(65536)
            c.close()

    threading.Thread(target=drop, daemon=True).start()
    try:
        assert cli.main(["alerts", "--rollout", "r1", "--notify", f"http://127.0.0.1:{port}/api/v2/alerts"]) == 1
    finally:
        srv.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected error" not in err, err
    assert err.startswith(f"ccab alerts: alert webhook http://127.0.0.1:{port}/api/v2/alerts closed the connection "
                          "without an answer"), err


def test_help_names_every_action(capsys):
    with pytest.raises(SystemExit):
        cli.main(["alerts", "--help"])
    assert "none, halted, rolled_back, promoted" in capsys.readouterr().out
