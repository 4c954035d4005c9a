"""The lab's bottleneck through ``ccab-link`` (delay, rate or trace, loss models).

- ``test_case_through_ccab_link_has_the_physics`` (root): one lab case (a Cubic download from a
  real nginx, 50 ms base RTT, 20 Mbit/s, 1 BDP) through ``bin/ccab-link``, Kafka, the loader and
  the warehouse. Physics bounds, not timings: idle handshake RTT and the flow's min RTT ≈ 2 × 25 ms
  (never below), goodput ≤ the payload limit of the rate and near it, no loss drops, the link
  process gone afterwards.
- Without root: the YAML keys (path default, loss_model, trace), the ccab-link command line, trace
  capacity and the metric parsing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ccab_workshop.lab import netns, runner, spec

from paths import REPO

# --- pure ----------------------------------------------------------------------------------------------


def _exp(bn: dict, **kw) -> spec.Experiment:
    return spec.expand({"name": "x", "bottleneck": bn, "cases": [{"name": "a", "flows": [{"cc": "cubic"}]}]}, **kw)


def test_path_defaults_to_link_when_there_is_a_base_rtt():
    assert _exp({"rtt_ms": 20}).cases[0].bottleneck["path"] == "link"
    assert _exp({"rtt_ms": 0}).cases[0].bottleneck["path"] == "tbf"
    assert _exp({"rtt_ms": 20, "path": "tbf"}).cases[0].bottleneck["path"] == "tbf"
    over = _exp({"rtt_ms": 20}, rtt_ms=100).cases[0].bottleneck
    assert over["rtt_ms"] == 100 and over["path"] == "link" and over["loss_model"] == "random"
    assert _exp({"rtt_ms": 20}, path_kind="tbf").cases[0].bottleneck["path"] == "tbf"


def test_link_keys_are_checked():
    with pytest.raises(spec.SpecError, match=r"bottleneck\.path: unknown value 'netem'"):
        _exp({"path": "netem"})
    with pytest.raises(spec.SpecError, match="needs ge_p"):
        _exp({"loss_model": "gilbert-elliott", "ge_r": 0.2})
    with pytest.raises(spec.SpecError, match="needs path: link"):
        _exp({"path": "tbf", "loss_model": "gilbert-elliott", "ge_p": 0.01, "ge_r": 0.2})
    with pytest.raises(spec.SpecError, match="trace needs path: link"):
        _exp({"rtt_ms": 0, "trace": "x.trace"})
    with pytest.raises(spec.SpecError, match=r"bottleneck\.loss_model: unknown value 'bursty'"):
        _exp({"loss_model": "bursty"})


def test_link_command_line(tmp_path):
    topo = netns.Topology(token="1-2", net=120, host_labels=["h1"], registry=None)
    ge = {"p": 0.001, "r": 0.2, "loss_bad": 1.0, "loss_good": 0.0}
    cmd = netns.Link(topo, tmp_path, delay_ms=25, rate_bps=20e6, buffer_bytes=125000, loss=0.01, ge=ge,
                     seed=7).command(Path("/x/ccab-link"))
    args = dict(zip(cmd[1::2], cmd[2::2]))
    assert args["--netns-a"] == topo.router and args["--netns-b"] == topo.client  # up = router → client (data)
    assert args["--addr-a"] == "10.120.250.1/24" and args["--addr-b"] == "10.120.250.2/24"
    assert (args["--delay-ms"], args["--rate-up-bps"], args["--buffer-up-bytes"]) == ("25", "20000000", "125000")
    assert (args["--loss-up"], args["--ge-p"], args["--ge-r"], args["--ge-direction"]) == ("0.01", "0.001", "0.2", "up")
    assert args["--rt-priority"] == "10" and args["--metrics-addr"] == "127.0.0.1:0"
    trace = tmp_path / "t.trace"
    trace.write_text("1\n1\n2\n4\n")  # 4 opportunities of 1500 B per 4 ms = 12 Mbit/s
    cmd = netns.Link(topo, tmp_path, delay_ms=30, trace=trace).command(Path("/x/ccab-link"))
    assert "--trace-up" in cmd and "--rate-up-bps" not in cmd and "--loss-up" not in cmd
    assert runner.trace_mean_bps(trace) == pytest.approx(12e6)


def test_link_metrics_summary():
    body = "\n".join([
        "# HELP x", 'ccab_link_dropped_packets_total{cause="buffer",direction="up"} 7',
        'ccab_link_dropped_packets_total{cause="loss",direction="up"} 3',
        'ccab_link_delivered_bytes_total{direction="up"} 1.5e+06',
        'ccab_link_release_lateness_seconds_bucket{direction="up",le="0.0001"} 90',
        'ccab_link_release_lateness_seconds_bucket{direction="up",le="0.001"} 99',
        'ccab_link_release_lateness_seconds_bucket{direction="up",le="+Inf"} 100'])
    got = netns.link_counters(netns.parse_metrics(body))
    assert got["up"]["dropped_packets"]["buffer"] == 7 and got["up"]["dropped_packets"]["loss"] == 3
    assert got["up"]["delivered_bytes"] == 1.5e6 and got["up"]["release_lateness_p99_s"] == 0.001
    assert got["down"]["delivered_bytes"] == 0 and got["down"]["release_lateness_p99_s"] is None


# --- through ccab-link (root) -------------------------------------------------------------------------------


def _need_link_lab() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, TUN devices, nginx)")
    for tool in ("ip", "nginx"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    for b in ("ccab-collector", "ccab-agent", "ccab-link"):
        if not (REPO / "bin" / b).exists():
            pytest.skip(f"bin/{b} is not built (make setup builds it)")
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun")


def test_case_through_ccab_link_has_the_physics(kafka_broker, tmp_path, monkeypatch, warehouse_service):
    _need_link_lab()
    monkeypatch.setenv("CCAB_KAFKA_BROKERS", kafka_broker)
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/t_lab_{os.getpid()}_{id(tmp_path) % 100000}")
    exp = spec.expand({"name": "link-test", "kind": "fairness", "seed": 3, "sample_interval_ms": 500,
                       "bottleneck": {"rate_mbit": 20, "buffer_bdp": 1, "rtt_ms": 50},
                       "cases": [{"name": "cubic", "flows": [{"cc": "cubic", "start_s": 0, "duration_s": 10}]}]})
    run_dir = runner.run(exp, tmp_path / "runs", log=print)
    run = json.loads((run_dir / "run.json").read_text())
    res = json.loads((run_dir / "results.json").read_text())
    info, case = run["cases"][0], res["cases"][0]
    assert run["delay_emulation"] == "ccab-link"
    ready = info["shaping"]["ccab-link"]["ready"]
    assert ready["event"] == "ready" and ready["up"]["delay_ms"] == 25
    # RTT ≈ 2 × delay: never below it (physics), and close to it when idle (+3 %: the host);
    # measured as TCP handshakes to the edge host's nginx before the traffic
    idle = info["base_rtt"]
    assert 50.0 <= idle["min_ms"] <= 51.5, idle
    (flow,) = case["flows"]
    assert 50.0 <= flow["min_rtt_ms"] <= 53.0, flow
    # goodput: at most the payload share of the rate (1448 of 1500 IP bytes; +3 % for the
    # collector's sampling edges), at least 85 % of it (a 1-BDP buffer keeps Cubic's pipe full)
    limit = 20e6 * 1448 / 1500
    assert 0.85 * limit <= flow["goodput_bps"] <= 1.03 * limit, flow["goodput_bps"]
    # the link's own counters: it delivered the bytes, dropped nothing to random loss, and stopped cleanly
    up = info["counters"]["ccab-link"]["up"]
    assert up["delivered_bytes"] >= 0.8 * flow["bytes_sent"] and up["dropped_packets"]["loss"] == 0
    assert info["link_stopped"]["event"] == "stopped" and info["link_stopped"]["exit"] == 0
    left = subprocess.run(["pgrep", "-f", info["shaping"]["ccab-link"]["command"][2]], capture_output=True, text=True)
    assert left.stdout.strip() == ""  # no ccab-link of this case's namespaces is left
    print(f"\nlab via ccab-link: idle RTT {idle}, min RTT {flow['min_rtt_ms']:.2f} ms, "
          f"goodput {flow['goodput_bps'] / 1e6:.2f} Mbit/s (limit {limit / 1e6:.2f})")
