"""The lab (``ccab lab``).

- ``test_fairness_cubic_vs_bbr_through_the_whole_stack`` (root): a 20-second fairness experiment,
  cubic vs bbr on two edge hosts, through real nginx + ccab-collector + ccab-agent in network
  namespaces, a ccab-link bottleneck (20 ms RTT), a real Kafka broker, the loader and the warehouse. Asserts the
  rows arrived with the sockets' real algorithms, that the per-flow goodput sum is the bottleneck
  rate (±15%: the one physical check), that nothing is left behind, that the hourly cohort job
  rolled the run up under PoP lab (cohort_hourly), and the report (canary report page format).
- The pure parts (YAML expansion, Jain, collapse, loss-at-75%, t-intervals) without root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ccab_workshop.lab import analysis, spec

from paths import REPO


# --- pure ----------------------------------------------------------------------------------------------


def test_sweep_expands_cases_and_substitutes():
    exp = spec.expand({"name": "x", "sweep": {"cc": ["cubic", "bbr"], "buffer_bdp": [0.5, 2]},
                       "cases": [{"name": "{cc}-{buffer_bdp}", "flows": [{"cc": "{cc}", "duration_s": 10}]}]})
    assert [c.name for c in exp.cases] == ["cubic-0.5", "cubic-2", "bbr-0.5", "bbr-2"]
    assert exp.cases[1].bottleneck["buffer_bdp"] == 2 and exp.cases[1].flows[0].cc == "cubic"
    quick = spec.expand({"name": "x", "quick": {"scale": 0.5, "sweep": {"cc": ["bbr"]}},
                         "sweep": {"cc": ["cubic", "bbr"]},
                         "cases": [{"name": "{cc}", "flows": [{"cc": "{cc}", "start_s": 2, "duration_s": 10}]}]},
                        quick=True)
    assert [(c.name, c.flows[0].start_s, c.flows[0].duration_s) for c in quick.cases] == [("bbr", 1.0, 5.0)]


def test_spec_errors_name_the_field():
    with pytest.raises(spec.SpecError, match="one congestion control per host"):
        spec.expand({"name": "x", "cases": [{"name": "a", "flows": [{"cc": "bbr", "host": "e"},
                                                                    {"cc": "cubic", "host": "e"}]}]})
    with pytest.raises(spec.SpecError, match=r"bottleneck\.delay: unknown field"):
        spec.expand({"name": "x", "bottleneck": {"delay": 3}, "cases": [{"flows": [{"cc": "bbr"}]}]})
    with pytest.raises(spec.SpecError, match=r"cases\[0\]\.flows\[0\]: requests need size"):
        spec.expand({"name": "x", "cases": [{"flows": [{"cc": "bbr", "kind": "requests"}]}]})
    # every problem at once, each naming its field; a sweep's value is named by the case it made
    with pytest.raises(spec.SpecError) as exc:
        spec.expand({"name": "x", "sweep": {"buffer_bdp": [0.5, -1]},
                     "cases": [{"name": "c-{buffer_bdp}", "flows": [{"cc": "bbr", "start_s": "soon"}]}]})
    assert exc.value.problems == [
        "cases[0] (c-0.5).flows[0].start_s: must be a number in [0, inf], got str 'soon'",
        "cases[0] (c--1).flows[0].start_s: must be a number in [0, inf], got str 'soon'",
    ], exc.value.problems
    with pytest.raises(spec.SpecError) as exc:
        spec.expand({"name": "x", "cases": [{"flows": [{"cc": "bbr", "size": "12Q", "typo": 1}]}]})
    assert exc.value.problems == [
        "cases[0].flows[0].size: size '12Q': expected a number with an optional K/M/G suffix",
        "cases[0].flows[0].typo: unknown field (allowed: cc, id, host, kind, start_s, duration_s, size, rate_per_s)"]
    assert spec.parse_size("10K") == 10240 and spec.parse_size("1M") == 1 << 20


def test_shipped_experiments_parse():
    for f in sorted((REPO / "lab" / "experiments").glob("*.yaml")):
        for quick in (False, True):
            exp = spec.load(f, quick=quick)
            assert exp.cases, f
    names = {spec.load(f).kind for f in (REPO / "lab" / "experiments").glob("*.yaml")}
    assert names == {"fairness", "size-fairness", "buffer-sweep", "loss-resilience", "cellular"}


def test_jain_collapse_loss75_ci():
    assert analysis.jain([10, 10]) == pytest.approx(1.0)
    assert analysis.jain([20, 0]) == pytest.approx(0.5)
    assert analysis.jain([1, 2, 3]) == pytest.approx(36 / (3 * 14))
    series = {"a": [(t, 19e6) for t in range(0, 20)], "b": [(t, 0.5e6 if 6 <= t <= 12 else 10e6) for t in range(2, 20)]}
    got = analysis.collapses(series, {"a": (0, 20), "b": (2, 20)}, capacity_bps=20e6, share=0.1, min_s=3)
    assert got == [{"flow": "b", "from_s": 6, "to_s": 12}]
    assert analysis.collapses(series, {"a": (0, 20), "b": (2, 20)}, 20e6, share=0.1, min_s=7) == []
    r = analysis.loss_at_fraction([(0, 20), (1, 18), (2, 10), (5, 5)])
    assert r == {"loss_pct": pytest.approx(1 + (18 - 15) / 8, abs=1e-3), "censored": None}
    assert analysis.loss_at_fraction([(0, 20), (10, 19)])["censored"] == ">max"
    # reference: scipy.stats.t.interval(0.95, 2, loc=2, scale=1/sqrt(3)) -> (-0.4841, 4.4841)
    ci = analysis.mean_ci([1, 2, 3])
    assert ci["mean"] == 2 and ci["ci"] == pytest.approx(2.4841, abs=1e-3)
    assert analysis.mean_ci([None])["n"] == 0


# --- the whole stack (root) --------------------------------------------------------------------------------


def _need_lab() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, tc, nginx)")
    for tool in ("ip", "tc", "nginx"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (make setup installs nginx-light, iproute2, nftables)")
    for b in ("ccab-collector", "ccab-agent"):
        if not (REPO / "bin" / b).exists():
            pytest.skip(f"bin/{b} is not built (make setup builds it)")
    avail = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    if not {"cubic", "bbr"} <= set(avail):
        pytest.skip(f"the kernel does not offer cubic and bbr (offers: {' '.join(avail)})")


FAIRNESS_20S = {
    "name": "fairness-test", "kind": "fairness", "seed": 9, "sample_interval_ms": 1000,
    "bottleneck": {"rate_mbit": 20, "buffer_bdp": 1, "rtt_ms": 20},
    "cases": [{"name": "cubic-bbr", "flows": [{"cc": "cubic", "start_s": 0, "duration_s": 20},
                                              {"cc": "bbr", "start_s": 3, "duration_s": 17}]}],
}


def test_fairness_cubic_vs_bbr_through_the_whole_stack(kafka_broker, tmp_path, monkeypatch, warehouse_service):
    _need_lab()
    from ccab_workshop.lab import report, runner
    from ccab_workshop.lab.netns import NS_PREFIX

    monkeypatch.setenv("CCAB_KAFKA_BROKERS", kafka_broker)  # the session's broker; start nothing
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))  # own warehouse
    monkeypatch.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/t_lab_{os.getpid()}_{id(tmp_path) % 100000}")
    exp = spec.expand(FAIRNESS_20S)
    run_dir = runner.run(exp, tmp_path / "runs", log=print)
    import json

    run = json.loads((run_dir / "run.json").read_text())
    res = json.loads((run_dir / "results.json").read_text())

    # repeatable: YAML, seed and kernel recorded
    assert run["seed"] == 9 and run["kernel"] == os.uname().release and run["yaml"]["name"] == "fairness-test"
    # the agent set each host's algorithm from a signed assignment
    hosts = run["cases"][0]["hosts"]
    assert {h["cc"]: h["agent"]["setter"] for h in hosts.values()} == {"cubic": "ccab-agent", "bbr": "ccab-agent"}
    assert all(h["agent"]["cc_effective"] == h["cc"] for h in hosts.values())
    # rows arrived through Kafka and the loader, with the sockets' real algorithms
    rows = res["rows"]
    assert rows["tcp_rows"] >= 20 and rows["http_rows"] == 2, rows
    assert sorted(rows["ccs"]) == ["bbr", "cubic"]
    assert run["load"]["dead_letters"] == 0
    # physics: the per-flow goodput sum over the window where both run is the bottleneck rate
    case = res["cases"][0]
    assert len(case["flows"]) == 2 and {f["cc"] for f in case["flows"]} == {"cubic", "bbr"}
    rate = 20e6
    assert abs(case["sum_goodput_bps"] - rate) / rate <= 0.15, case["sum_goodput_bps"]
    assert case["jain"] is not None and 0.5 <= case["jain"] <= 1.0
    # cleanup: no namespace of this process is left
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{NS_PREFIX}{os.getpid()}-" not in left
    # the same pipeline as production: the hourly cohort job rolled the run up under PoP lab
    from ccab.base.warehouse import connect

    wh = connect()
    try:
        by_cc = dict(wh.query(
            "SELECT cc, sum(n) FROM cohort_hourly WHERE pop = 'lab' AND rollout_id = {r:String} "
            "AND metric = 'rtt_us' AND segment = 'all' GROUP BY cc",
            params={"r": run["rollout_id"]}).rows)
        # nginx lines carry their own host's default cc (read inside its namespace: --cc-netns)
        http_cc = wh.query("SELECT DISTINCT cc FROM http_requests WHERE pop = 'lab' AND rollout_id = {r:String}",
                           params={"r": run["rollout_id"]}).rows
        # every connection of the run closed and was captured at close (tcp_conn/1), by algorithm
        closed_cc = dict(wh.query("SELECT cc, count() FROM tcp_conns WHERE pop = 'lab' AND rollout_id = {r:String} "
                                  "GROUP BY cc", params={"r": run["rollout_id"]}).rows)
    finally:
        wh.close()
    assert sorted(closed_cc) == ["bbr", "cubic"], closed_cc
    assert sorted(c for (c,) in http_cc) == ["bbr", "cubic"], http_cc
    assert sorted(by_cc) == ["bbr", "cubic"] and all(int(n) > 0 for n in by_cc.values()), by_cc
    assert run["cohorts"]["hours"] and run["cohorts"]["rollup_rows"] > 0, run["cohorts"]
    # the report, in the canary report's page format, with every figure it references
    from ccab.report import html as page_kit

    index = report.build(run_dir)
    page = index.read_text()
    assert page_kit.CSS in page and '<nav class="toc">' in page
    sections = re.findall(r'<section id="([^"]+)">', page)
    assert sections == ["run", "summary", "shares", "per-case", "flows"], sections
    assert all(f'<a href="#{s}">' in page for s in sections)
    assert run["rollout_id"] in page and "PoP lab" in page
    figures = re.findall(r'<img src="([^"]+)"', page)
    assert sorted(figures) == ["case_cubic-bbr.png", "fairness_shares.png"], figures
    assert all((index.parent / f).stat().st_size > 5000 for f in figures)
    flows = page[page.index('<section id="flows">'):]
    assert flows.count("<tbody><tr") == 1 and flows.count("</tr>") == 3  # header + one row per flow
    collapsed = bool(case["collapses"])
    assert ('class="badge badge-bad">collapse' in flows) == collapsed and ('cell-good">no<' in flows) == (
        len({c["flow"] for c in case["collapses"]}) < 2)
    print(f"\nlab: {rows['tcp_rows']} tcp_samples, goodput sum {case['sum_goodput_bps'] / 1e6:.2f} Mbit/s "
          f"({', '.join(f['cc'] + ' ' + format(f['goodput_bps'] / 1e6, '.2f') for f in case['flows'])}), "
          f"Jain {case['jain']:.3f}")


FAIRNESS_BBR2 = {
    "name": "fairness-bbr2-test", "kind": "fairness", "seed": 9, "sample_interval_ms": 1000,
    "bottleneck": {"rate_mbit": 20, "buffer_bdp": 1, "rtt_ms": 20},
    "cases": [{"name": "cubic-bbr2", "flows": [{"cc": "cubic", "start_s": 0, "duration_s": 12},
                                               {"cc": "bbr2", "start_s": 2, "duration_s": 10}]}],
}


def test_bbr2_arm_on_a_kernel_without_bbr2(kafka_broker, tmp_path, monkeypatch, warehouse_service):
    """A bbr2 case runs on this kernel (which has no bbr2): the agent loads ccab's BPF bbr2 for its
    host, the sockets run it, the close capture records it as cc_impl ccab-bpf through Kafka and
    the loader, and the lab's teardown releases it (unregistered when no one else uses it)."""
    _need_lab()
    from ccab_workshop.lab import edge, runner

    if "bbr2" in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split() \
            and not Path("/sys/fs/bpf/ccab-cc/bbr2").exists():
        pytest.skip("this kernel has its own bbr2: the BPF one is not loaded over it")
    if not edge.bpf_loadable([]):
        pytest.skip("no kernel BTF: the agent cannot load BPF congestion controls")
    monkeypatch.setenv("CCAB_KAFKA_BROKERS", kafka_broker)
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/t_lab_bbr2_{os.getpid()}")  # the session's service
    run_dir = runner.run(spec.expand(FAIRNESS_BBR2), tmp_path / "runs", log=print)
    import json

    run = json.loads((run_dir / "run.json").read_text())
    assert run["algorithms_unavailable"] == [] and "bbr2" in run["environment"]["cc_bpf"]
    hosts = run["cases"][0]["hosts"]
    assert {h["cc"]: h["agent"]["cc_effective"] for h in hosts.values()} == {"cubic": "cubic", "bbr2": "bbr2"}
    from ccab.base.warehouse import connect

    wh = connect()
    try:
        impl = dict(wh.query("SELECT cc, any(cc_impl) FROM tcp_conns WHERE pop = 'lab' AND rollout_id = {r:String} "
                             "GROUP BY cc", params={"r": run["rollout_id"]}).rows)
    finally:
        wh.close()
    assert impl == {"bbr2": "ccab-bpf", "cubic": "kernel"}, impl
    users = Path("/run/ccab-cc/users/bbr2")
    assert not users.exists() or not any(h["host"] in {p.name for p in users.iterdir()} for h in hosts.values())
