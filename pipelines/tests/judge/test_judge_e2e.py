"""The judge end to end on the real engine: simulated PoPs → ccab load → ccab analyze → ccab alerts.

- canary-tyo1: the BBRv1 retransmit regression and the BBRv2 high-loss tail are flagged (and the
  alerts reach a webhook in Alertmanager's shape); re-running does not duplicate alerts.
- aa: nothing is flagged, no gate fails (one load: the CLI's analysis, then the judge again without writing).
- data-quality gates on the aa data made bad the way edges go bad (one host silent for 2 hours,
  halved sampling on the treatment arm, 5 % of connections on the wrong cc): "no decision".
"""

from __future__ import annotations

import http.server
import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import orjson
from paths import REPO
from worlds import sim_world
import pytest
from ccab import cli
from ccab.cohorts.job import run_window
from ccab.ingest.loader import load_files
from ccab.judge import DEFAULT_GUARDRAILS, judge_window

HOURS = 3
START = datetime(2025, 11, 20, 0, tzinfo=timezone.utc)
END = datetime(2025, 11, 20, HOURS, tzinfo=timezone.utc)
WINDOW = ["--from", "2025-11-20T00:00Z", "--to", f"2025-11-20T{HOURS:02d}:00Z"]


@pytest.fixture(scope="module")
def canary_sim(canary_world):
    assert HOURS == 3  # the session's canary world (conftest) covers 3 hours
    return canary_world


@pytest.fixture(scope="module")
def aa_sim(tmp_path_factory):
    return sim_world(tmp_path_factory, "aa", "--hours", str(HOURS), "--connections", "30000")


class _Receiver(http.server.BaseHTTPRequestHandler):
    posts: list = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    _Receiver.posts = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/api/v2/alerts", _Receiver.posts
    server.shutdown()


def _alerts_json(capsys, *args) -> list[dict]:
    capsys.readouterr()
    assert cli.main(["alerts", "--json", "--severity", "all", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_canary_flags_bbr1_retransmits_and_bbr2_high_loss_tail(canary_sim, warehouse_env, capsys, webhook):
    url, posts = webhook
    assert cli.main(["load", str(canary_sim / "ccab.tcp.v1.jsonl"), str(canary_sim / "ccab.http.v1.jsonl")]) == 0
    assert cli.main(["analyze", *WINDOW, "--no-progress", "--notify", url]) == 0
    out = capsys.readouterr().out
    assert "bbr1 vs control: ROLLBACK" in out and "bbr2 vs control: ROLLBACK" in out

    alerts = _alerts_json(capsys, "--rollout", "tyo1-bbr-canary")
    flagged = {(a["treatment_arm"], a["metric"], a["statistic"], a["severity"]) for a in alerts
               if a["direction"] == "regression" and a["kind"] == "guardrail"}
    assert ("bbr1", "retrans_pct", "ratio", "page") in flagged
    assert ("bbr2", "retrans_pct", "share_above:50", "ticket") in flagged  # the high-loss tail
    bbr1 = next(a for a in alerts if a["treatment_arm"] == "bbr1" and a["statistic"] == "ratio"
                and a["kind"] == "guardrail")
    assert bbr1["estimate"] > 2 and bbr1["ci_low"] > 1 and bbr1["p_value"] < 0.01
    assert {"alert_id", "ts_ms", "rollout_id", "pop", "segment", "control_arm", "action"} <= set(bbr1)
    assert bbr1["control_arm"] == "control" and bbr1["action"] == "none" and bbr1["pop"] == "tyo1"
    assert bbr1["report_url"].endswith("/reports/tyo1-bbr-canary/index.html")

    # the webhook got the page/ticket alerts in Alertmanager's postableAlerts shape
    assert posts and posts[0][0] == "/api/v2/alerts"
    sent = [a for _, body in posts for a in body]
    assert {a["labels"]["alert_id"] for a in sent} == {a["alert_id"] for a in alerts if a["severity"] != "info"}
    page = next(a for a in sent if a["labels"]["alert_id"] == bbr1["alert_id"])
    assert page["labels"]["severity"] == "page" and page["startsAt"].endswith("Z")
    text = page["annotations"]["description"]
    assert "retrans_pct" in text and "%" in text and "p=" in text and "Action:" in text  # what, how much, how sure, done

    # re-running the analysis updates the same alerts instead of adding new ones
    assert cli.main(["analyze", *WINDOW, "--no-progress", "--rollout", "tyo1-bbr-canary"]) == 0
    again = _alerts_json(capsys, "--rollout", "tyo1-bbr-canary")
    assert sorted(a["alert_id"] for a in again) == sorted(a["alert_id"] for a in alerts)

    # what the controller did is recorded on the alert
    from ccab.dags.tasks import warehouse
    from ccab.judge.alerts.close import set_action

    with warehouse() as wh:
        set_action(wh, [bbr1["alert_id"]], "rolled_back")
    after = {a["alert_id"]: a["action"] for a in _alerts_json(capsys, "--rollout", "tyo1-bbr-canary")}
    assert after[bbr1["alert_id"]] == "rolled_back"

    # the simulator's pre-period (same hosts, no arm) is the judge's: guardrails adjusted, the
    # variance cut in the verdict, client-speed bands from pre-period goodput in heterogeneity
    with warehouse() as wh:
        adj = wh.query("""SELECT treatment_arm, metric, statistic, adjustment, variance_reduction FROM judge_results
                          FINAL WHERE role = 'guardrail' AND rollout_id = 'tyo1-bbr-canary'""").rows
        speed = wh.query("""SELECT DISTINCT segment FROM judge_results FINAL
                            WHERE rollout_id = 'tyo1-bbr-canary' AND segment LIKE 'speed:%'""").rows
        reasons = [r for (rs,) in wh.query("SELECT reasons FROM judge_verdicts FINAL").rows for r in rs]
    print("adjustment:", adj, "speed segments:", speed)
    assert adj and all(a.startswith("cuped") for *_, a, _ in adj), adj
    assert all(v is not None for *_, v in adj)
    assert speed
    assert any(r.startswith("pre-period adjustment (2025-11-13 00:00–2025-11-20 00:00 UTC)") for r in reasons), reasons

    # power from the history's host-level spread: the per-host window statistic computed in SQL
    # equals the one read from the host's merged histogram in Python
    from ccab.judge import data
    from ccab.judge.power import host_window_values
    from ccab.judge.stats import arm_quantile_ci

    with warehouse() as wh:
        in_sql = host_window_values(wh, "goodput_bps", "p10", 1, START, END, pop="tyo1", arm="control")
        rows = data.host_rows(wh, "tyo1", "tyo1-bbr-canary", "all", START, START.replace(hour=1), ["goodput_bps"],
                              ["control"])["goodput_bps"]
    arr = data.host_arrays(rows, "none", "control")
    in_python = sorted(arm_quantile_ci(arr.hist[i:i + 1], arr.n_zero[i:i + 1], arr.bins, 0.1)[0]
                       for i in range(arr.n.size))
    assert len(in_sql) == HOURS and sorted(in_sql[0]) == pytest.approx(in_python, rel=1e-9)
    capsys.readouterr()
    assert cli.main(["power", "--metric", "goodput_bps", "--statistic", "p10", "--mde", "0.05", "--arm", "control",
                     "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table[0]["duration_h"] == 1 and table[0]["windows"] == HOURS and table[0]["hosts"] == 7
    assert table[0]["sigma_log"] > 0 and table[0]["hosts_per_arm"] >= 2
    assert 0 <= table[0]["variance_reduction"] <= 1  # consecutive hours of the same hosts: with adjustment


def test_aa_flags_nothing_and_every_gate_passes(aa_sim, warehouse_env, capsys):
    assert cli.main(["load", str(aa_sim / "ccab.tcp.v1.jsonl"), str(aa_sim / "ccab.http.v1.jsonl")]) == 0
    assert cli.main(["analyze", *WINDOW, "--no-progress", "--control", "control"]) == 0
    out = capsys.readouterr().out
    assert "data-quality gate failed" not in out
    assert _alerts_json(capsys, "--rollout", "tyo1-aa") == []

    # the same clean data, judged again without writing: every gate passes and the verdict is a
    # decision; one kernel for every host: no kernel segment (it would only repeat 'all')
    from ccab.dags.tasks import warehouse

    with warehouse() as wh:
        report = judge_window(wh, START, END, "tyo1-aa", write=False)
    (verdict,) = report.verdicts
    assert [g for g in report.rollouts[0].gates if g.status == "fail"] == []
    assert verdict.decision in ("pass", "halt", "continue")  # a decision, not "no_decision"
    results = report.rollouts[0].results
    assert not [r for r in results if r.segment.startswith("kernel:")]
    assert {r.segment for r in results if r.role == "segment"} >= {"rtt:0-20ms", "size:<4MiB"}

    assert cli.main(["analyze", *WINDOW, "--no-progress", "--control", "nonesuch", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(v["decision"] == "no_decision" and "no control arm 'nonesuch'" in v["reasons"][0]
               for v in doc["judge"]["verdicts"])


# ---- gates: the aa data made bad on the way in -------------------------------------------------------

def _rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy a JSONL file through ``edit(record) -> record | None`` (None drops it)."""
    with src.open("rb") as fin, dst.open("wb") as fout:
        for line in fin:
            rec = edit(orjson.loads(line))
            if rec is not None:
                fout.write(orjson.dumps(rec) + b"\n")
    return dst


def _judge_modified(warehouse, aa_sim, tmp_path, edit_tcp=None, edit_http=None):
    tcp = aa_sim / "ccab.tcp.v1.jsonl"
    http = aa_sim / "ccab.http.v1.jsonl"
    if edit_tcp:
        tcp = _rewrite(tcp, tmp_path / "tcp.jsonl", edit_tcp)
    if edit_http:
        http = _rewrite(http, tmp_path / "http.jsonl", edit_http)
    assert not load_files(warehouse, [tcp, http]).dead
    run_window(warehouse, START, END)
    return judge_window(warehouse, START, END, "tyo1-aa", write=False)


def _verdict_and_gates(report):
    (verdict,) = report.verdicts
    return verdict, report.rollouts[0].gates


def _hour(rec) -> int:
    return (rec["ts_ms"] // 1000 - int(START.timestamp())) // 3600


def test_gate_one_host_silent_for_two_hours(warehouse, aa_sim, tmp_path):
    silent = "edge-tyo1-03"

    def drop(rec):
        return None if rec["host"] == silent and _hour(rec) >= 1 else rec

    verdict, gates = _verdict_and_gates(_judge_modified(warehouse, aa_sim, tmp_path, drop, drop))
    assert verdict.decision == "no_decision"
    failed = [g for g in gates if g.status == "fail"]
    assert [(g.gate, g.host) for g in failed] == [("host_completeness", silent), ("traffic_share", silent)]
    assert failed[0].value == 2 and "2 of 3 hour(s)" in failed[0].detail
    # the simulator's pre-period gives the traffic-share gate its baseline: the silent host's share fell
    assert failed[1].value < 1 / 1.5


def test_gate_halved_sampling_on_the_treatment_arm(warehouse, aa_sim, tmp_path):
    def halve(rec):
        if rec["arm"] != "treatment":
            return rec
        if int(rec["sock_id"], 16) % 2:  # a whole connection is sampled or not
            return None
        return {**rec, "sample_rate": rec["sample_rate"] / 2}

    verdict, gates = _verdict_and_gates(_judge_modified(warehouse, aa_sim, tmp_path, edit_tcp=halve))
    assert verdict.decision == "no_decision"
    assert any(g.gate == "sampling_rate" and g.arm == "treatment" and g.host == "" and g.status == "fail"
               for g in gates)
    assert any("sampling_rate treatment" in r for r in verdict.reasons)


def test_gate_five_percent_of_connections_on_the_wrong_cc(warehouse, aa_sim, tmp_path):
    def mislabel(rec):
        if rec["arm"] == "treatment" and int(rec["sock_id"], 16) % 20 == 0:
            return {**rec, "cc": "bbr"}
        return rec

    verdict, gates = _verdict_and_gates(_judge_modified(warehouse, aa_sim, tmp_path, edit_tcp=mislabel))
    assert verdict.decision == "no_decision"
    bad = [g for g in gates if g.gate == "cc_compliance" and g.status == "fail"]
    assert bad and all(g.arm == "treatment" and 0.02 < g.value < 0.09 for g in bad)


def test_the_rollout_plan_sets_control_guardrails_and_breakers(warehouse_env):
    import shutil

    from ccab.pipeline import rollout_options

    assert rollout_options("tyo1-bbr-canary") is None  # no controller, no plan
    stored = warehouse_env / "rollouts" / "tyo1-bbr-canary"
    stored.mkdir(parents=True)
    shutil.copy(REPO / "rollout/plans/tyo1-bbr-canary.yaml", stored / "plan.yaml")
    shutil.copy(REPO / "rollout/plans/tyo1-hosts.txt", stored / "tyo1-hosts.txt")
    declared = rollout_options("tyo1-bbr-canary")
    assert declared.control_arm == "control" and declared.note == ""
    assert ("retrans_pct", "p50", 4.0) in {(g.metric, g.statistic, g.margin) for g in declared.guardrails}
    assert [(b.ratio, b.minutes) for b in declared.breakers] == [(20.0, 30)]
    (stored / "plan.yaml").write_text("rollout_id: [")
    assert "invalid" in rollout_options("tyo1-bbr-canary").note


def test_kernel_is_a_heterogeneity_segment_when_both_arms_run_several_kernels(warehouse, aa_sim, tmp_path):
    """Half of each arm's hosts on another kernel: each guardrail is also estimated per kernel
    (a pre-treatment attribute here), with BH within the guardrail's family."""
    truth = json.loads((aa_sim / "truth.json").read_text())
    by_arm: dict[str, list[str]] = {}
    for h in truth["hosts"]:
        by_arm.setdefault(h["arm"], []).append(h["host"])
    newer = {h for hosts in by_arm.values() for h in sorted(hosts)[: len(hosts) // 2]}

    def kernel(rec):
        return {**rec, "kernel": "6.12.0-test"} if rec["host"] in newer else rec

    report = _judge_modified(warehouse, aa_sim, tmp_path, kernel, kernel)
    segs = [r for r in report.rollouts[0].results if r.role == "segment" and r.segment.startswith("kernel:")]
    assert {r.segment for r in segs} == {"kernel:6.12.0-test", "kernel:6.1.0-18-amd64"}
    assert {(r.metric, r.statistic) for r in segs} == {(g.metric, g.statistic) for g in DEFAULT_GUARDRAILS}
    assert all(r.q_value is not None and r.hosts_treatment >= 2 and r.hosts_control >= 2 for r in segs)
