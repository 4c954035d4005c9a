"""The hourly cohort job on simulated data, against the independent reference.

Data: ``ccab sim tiny --hours 2`` (2025-11-20 12:00-14:00 UTC, 5 hosts, 3 arms, ~5k tcp samples,
~19k requests), loaded through the real loader into a real (embedded) ClickHouse.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from ccab import cli
from ccab.base import bins
from ccab.cohorts.job import (CohortJobError, Fingerprint, JobConfig, Watermark, batches, refresh_late, rollup_hour,
                              run_window, stale_hours, stale_reason)
from ccab.ingest.loader import load_files
from cohort_reference import (MIB, actual_heatmap, actual_rollup, assert_rollups_match, connections,
                                    expected_heatmap, expected_rollup, read_jsonl)

H12 = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
H13 = H12 + timedelta(hours=1)
H15 = H12 + timedelta(hours=3)


@pytest.fixture(scope="module")
def sim_dir(tiny_world) -> Path:
    return tiny_world  # the shared `ccab sim tiny --hours 2` (conftest)


@pytest.fixture(scope="module")
def records(sim_dir):
    return read_jsonl(sim_dir / "ccab.tcp.v1.jsonl"), read_jsonl(sim_dir / "ccab.http.v1.jsonl")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(wh, *paths: Path) -> None:
    report = load_files(wh, list(paths))
    assert not report.dead, report.dead


def snapshot(wh) -> dict:
    """Everything the job writes, aggregated (rows may not have merged yet)."""
    return {
        "rollup": actual_rollup(wh),
        "heatmap": actual_heatmap(wh),
        "prefixes": sorted(wh.query("SELECT * FROM cohort_prefix_hourly").rows),
        "raw_rows": {t: wh.query(f"SELECT count() FROM {t}").scalar()
                     for t in ("cohort_hourly", "cohort_heatmap_hourly", "cohort_prefix_hourly")},
    }


def test_rollup_matches_independent_computation(warehouse, sim_dir, records):
    tcp, http = records
    load(warehouse, sim_dir / "ccab.tcp.v1.jsonl", sim_dir / "ccab.http.v1.jsonl")
    report = run_window(warehouse, H12, H15)
    assert [h.skipped for h in report.hours] == [False, False, True]  # 14:00 has no rows
    expected = expected_rollup(tcp, http)
    assert_rollups_match(expected, actual_rollup(warehouse))
    assert expected_heatmap(tcp) == actual_heatmap(warehouse)
    # every connection counted exactly once over the hours, whatever its lifetime
    n_conns = len({(r["host"], r["sock_id"]) for r in tcp})
    assert sum(s.n + s.n_missing for k, s in expected.items() if k[8:] == ("all", "rtt_us")) == n_conns
    assert sum(h.connections for h in report.hours) == n_conns
    # stage tables are left empty
    for t in ("cohort_hourly_stage", "cohort_heatmap_hourly_stage", "cohort_prefix_hourly_stage",
              "cohort_connections_stage"):
        assert warehouse.query(f"SELECT count() FROM {t}").scalar() == 0, t
    assert stale_hours(warehouse, H12 - timedelta(hours=3), H15) == {}


def test_batches_are_runs_of_consecutive_hours_of_bounded_length():
    h = [H12 + timedelta(hours=i) for i in range(8)]
    assert batches([h[5], h[0], h[1], h[3], h[4], h[7]], max_hours=2) == [[h[0], h[1]], [h[3], h[4]], [h[5]], [h[7]]]
    assert batches(h, max_hours=24) == [h]
    assert batches([]) == []


def test_rerunning_an_interval_three_times_changes_nothing(tiny_warehouse):
    warehouse = tiny_warehouse  # loaded and rolled up (conftest)
    first = snapshot(warehouse)
    for _ in range(3):
        run_window(warehouse, H12, H13)  # the scheduled interval again
        rollup_hour(warehouse, H13)
    again = snapshot(warehouse)
    assert_rollups_match(first.pop("rollup"), again.pop("rollup"))  # float sums: to rounding
    assert again == first
    marks = warehouse.query("SELECT hour FROM cohort_watermarks FINAL ORDER BY hour").rows
    assert [m[0] for m in marks] == ["2025-11-20 12:00:00", "2025-11-20 13:00:00"]


def test_late_rows_make_their_hours_stale_and_are_picked_up(warehouse, sim_dir, records, tmp_path):
    """Hold back the whole 13:00 hour of tcp samples and a tenth of every other record, load them
    after the hours were computed, and check the look-back pass brings the rollup to the full data."""
    tcp, http = records
    rng = np.random.default_rng(5)
    h13_ms = int(H13.timestamp() * 1000)
    tcp_is_late = [r["ts_ms"] >= h13_ms or rng.random() < 0.1 for r in tcp]
    late_tcp = [r for r, late in zip(tcp, tcp_is_late) if late]
    early_tcp = [r for r, late in zip(tcp, tcp_is_late) if not late]
    http_is_late = [rng.random() < 0.1 for _ in http]
    late_http = [r for r, late in zip(http, http_is_late) if late]
    early_http = [r for r, late in zip(http, http_is_late) if not late]
    load(warehouse, write_jsonl(tmp_path / "early.jsonl", early_tcp + early_http))
    run_window(warehouse, H12, H15)
    assert_rollups_match(expected_rollup(early_tcp, early_http), actual_rollup(warehouse))

    load(warehouse, write_jsonl(tmp_path / "late.jsonl", late_tcp + late_http))
    stale = stale_hours(warehouse, H12 - timedelta(hours=2), H15)
    # 12:00 got late rows of its own and its connections' next-hour samples; 13:00 got its samples
    assert stale == {H12: "late data", H13: "late data"}
    report = refresh_late(warehouse, H15, JobConfig(lookback=timedelta(hours=4)))
    assert sorted(h.hour for h in report.computed) == [H12, H13]
    assert_rollups_match(expected_rollup(tcp, http), actual_rollup(warehouse))
    assert expected_heatmap(tcp) == actual_heatmap(warehouse)
    assert stale_hours(warehouse, H12 - timedelta(hours=2), H15) == {}
    # the connections that continued into 13:00 moved out of 12:00: nothing counted twice
    n_conns = len({(r["host"], r["sock_id"]) for r in tcp})
    got = warehouse.query("SELECT sum(n) + sum(n_missing) FROM cohort_hourly WHERE metric = 'rtt_us' "
                          "AND segment = 'all'").scalar()
    assert got == n_conns


def test_late_rows_in_the_same_second_are_still_detected(warehouse, sim_dir, records, tmp_path):
    """_loaded_at has 1 s resolution: the fingerprint also counts rows, so a load right after a
    computation is not missed."""
    tcp, http = records
    h12 = [r for r in tcp if r["ts_ms"] < int(H13.timestamp() * 1000)]
    load(warehouse, write_jsonl(tmp_path / "a.jsonl", h12[:-5]))
    rollup_hour(warehouse, H12)
    load(warehouse, write_jsonl(tmp_path / "b.jsonl", h12[-5:]))
    assert stale_hours(warehouse, H12, H13) == {H12: "late data"}


def test_bulk_filter_is_a_parameter_and_recorded(warehouse, sim_dir, records):
    tcp, http = records
    load(warehouse, sim_dir / "ccab.tcp.v1.jsonl", sim_dir / "ccab.http.v1.jsonl")
    cfg = JobConfig(bulk_min_bytes=4 * MIB)
    run_window(warehouse, H12, H15, cfg)
    assert_rollups_match(expected_rollup(tcp, http, bulk_min=4 * MIB), actual_rollup(warehouse))
    assert stale_hours(warehouse, H12, H15) == {H12: "bulk filter changed", H13: "bulk filter changed"}
    assert stale_hours(warehouse, H12, H15, cfg) == {}


def test_hours_whose_raw_rows_are_gone_keep_their_rollup(tiny_warehouse):
    warehouse = tiny_warehouse  # loaded and rolled up (conftest)
    before = snapshot(warehouse)
    warehouse.command("TRUNCATE TABLE tcp_samples")  # as if the 90-day TTL had expired them
    warehouse.command("TRUNCATE TABLE http_requests")
    report = run_window(warehouse, H12, H15)
    assert all(h.skipped for h in report.hours)
    assert snapshot(warehouse) == before  # untouched: not even recomputed


def test_a_failing_step_names_the_hour_and_keeps_the_old_rollup(warehouse, sim_dir):
    load(warehouse, sim_dir / "ccab.tcp.v1.jsonl", sim_dir / "ccab.http.v1.jsonl")
    run_window(warehouse, H12, H13)
    before = snapshot(warehouse)
    warehouse.command("RENAME TABLE cohort_heatmap_hourly_stage TO cohort_heatmap_hourly_stage_gone")
    with pytest.raises(CohortJobError, match=r"(?s)hour 2025-11-20T12:00Z, step 'clear the stage tables'.*ccab analyze"):
        rollup_hour(warehouse, H12)
    after = snapshot(warehouse)
    assert_rollups_match(before.pop("rollup"), after.pop("rollup"))
    assert after == before


QUANTILE_METRICS = ("retrans_pct", "rtt_us", "min_rtt_us", "delivery_rate_bps", "inflight_bytes", "goodput_bps",
                    "inflight_bytes_per_sample")


def test_histogram_quantiles_are_within_the_bin_width_of_exact_ones(tiny_warehouse, records):
    """p10/p50/p90/p99 per arm from the merged rollup histograms (the view, and the Python reader)
    vs the exact quantiles of the same values computed from the records."""
    tcp, http = records
    warehouse = tiny_warehouse  # loaded, rolled up, views installed (conftest)
    worst: dict[str, float] = {}
    for metric in QUANTILE_METRICS:
        values = exact_values(tcp, http, metric)
        view = {r["arm"]: r for r in warehouse.query(
            "SELECT * FROM cohort_quantiles(pop = '', rollout_id = '', metric = {m:String}, segment = 'all', "
            "t_from = '2025-11-20 00:00:00', t_to = '2025-11-21 00:00:00')", params={"m": metric}).dicts()}
        assert set(view) == set(values), metric
        worst[metric] = 0.0
        for arm, v in values.items():
            assert view[arm]["n"] == len(v)
            hist = merged_histogram(warehouse, metric, arm)
            for col, p in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
                exact = bins.exact_quantile(v, p)
                got = view[arm][col]
                assert got == pytest.approx(hist.quantile(p), rel=1e-12)  # SQL and Python read it alike
                if exact == 0:
                    assert got == 0, (metric, arm, col)
                    continue
                err = abs(got / exact - 1)
                worst[metric] = max(worst[metric], err)
                assert err <= bins.MAX_QUANTILE_REL_ERROR + 1e-12 < bins.REL_WIDTH, (metric, arm, col, got, exact)
    print("worst relative quantile error per metric (bin width "
          f"{bins.REL_WIDTH:.4%}): " + ", ".join(f"{m} {e:.4%}" for m, e in worst.items()))


def exact_values(tcp, http, metric) -> dict[str, np.ndarray]:
    """Per arm, every value of ``metric`` (the reference's grain), without missing ones."""
    out: dict[str, list] = {}
    if metric == "goodput_bps":
        for r in http:
            if r["body_bytes_sent"] >= MIB and r["request_time_ms"] > 0:
                out.setdefault(r["arm"], []).append(r["body_bytes_sent"] * 8 / (r["request_time_ms"] / 1000))
    elif metric == "inflight_bytes_per_sample":
        for r in tcp:
            out.setdefault(r["arm"], []).append(r["send_q_bytes"] - r["notsent_bytes"])
    else:
        for c in connections(tcp):
            if c[metric] is not None:
                out.setdefault(c["arm"], []).append(c[metric])
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def merged_histogram(wh, metric: str, arm: str) -> bins.Histogram:
    params = {"m": metric, "a": arm}
    n_zero = wh.query("SELECT sum(n_zero) FROM cohort_hourly WHERE metric = {m:String} "
                      "AND arm = {a:String} AND segment = 'all'", params=params).scalar()
    cells = wh.query("SELECT bin, sum(count) FROM cohort_cells_hourly WHERE metric = {m:String} "
                     "AND arm = {a:String} AND segment = 'all' GROUP BY bin", params=params).rows
    return bins.Histogram(int(n_zero), {int(k): int(c) for k, c in cells})


# --------------------------------------------------------------------------- pure parts


def test_stale_reason_rules():
    fp = Fingerprint(10, "2025-11-20 13:00:00", 5, "2025-11-20 13:00:01", own_rows=8)
    wm = Watermark(fp, 1 << 20, "v1")
    assert stale_reason(fp, wm, 1 << 20, "v1") is None
    assert stale_reason(fp, None, 1 << 20, "v1") == "never computed"
    assert stale_reason(Fingerprint(11, fp.tcp_max_loaded_at, 5, fp.http_max_loaded_at, 8), wm, 1 << 20, "v1") == "late data"
    assert stale_reason(Fingerprint(10, "2025-11-20 14:00:00", 5, fp.http_max_loaded_at, 8), wm, 1 << 20, "v1") == "late data"
    assert stale_reason(fp, wm, 2 << 20, "v1") == "bulk filter changed"
    assert stale_reason(fp, wm, 1 << 20, "v2") == "job SQL changed"
    assert stale_reason(Fingerprint(0, "", 0, "", own_rows=0), None, 1 << 20, "v1") is None


def test_histogram_merge_is_exact_and_quantiles_bounded():
    rng = np.random.default_rng(1)
    parts = [np.concatenate([np.zeros(rng.integers(0, 50)), rng.lognormal(3, 2, rng.integers(1, 500))]) for _ in range(20)]
    merged = bins.Histogram()
    for p in parts:
        merged = merged.merge(bins.Histogram.from_values(p))
    whole = np.concatenate(parts)
    assert merged == bins.Histogram.from_values(whole)
    for p in (0.01, 0.1, 0.5, 0.9, 0.99, 1.0):
        exact = bins.exact_quantile(whole, p)
        got = merged.quantile(p)
        assert got == 0 if exact == 0 else abs(got / exact - 1) <= bins.MAX_QUANTILE_REL_ERROR
    assert merged.cdf(-1) == 0 and merged.cdf(float(whole.max())) == 1
    assert math.isnan(bins.Histogram().quantile(0.5))


def test_coarse_bins_are_fine_bins_divided_by_16():
    v = np.random.default_rng(2).lognormal(0, 6, 10_000)
    assert np.array_equal(bins.coarse_bins(v), bins.coarsen(bins.fine_bins(v), 8))
    assert bins.coarse_bins(np.array([0.0]))[0] == bins.ZERO_BIN


def test_hour_boundaries_are_enforced():
    from ccab.base.chtime import hours_between

    with pytest.raises(ValueError, match="not on an hour boundary"):
        hours_between(H12 + timedelta(minutes=5), H15)
    assert hours_between(H12.replace(tzinfo=None), H13) == [H12]


def test_close_records_give_every_connection_once(warehouse, sim_dir, records):
    """With tcp_conn/1 records the per-connection grain comes from them: every sampled connection
    that closed counts once (the short ones no poll saw too), a connection seen by both paths is
    counted once, and in-flight bytes of a connection never polled while busy are missing, not 0."""
    tcp, http = records
    closes = read_jsonl(sim_dir / "ccab.tcp_conn.v1.jsonl")
    load(warehouse, sim_dir / "ccab.tcp.v1.jsonl", sim_dir / "ccab.tcp_conn.v1.jsonl", sim_dir / "ccab.http.v1.jsonl")
    run_window(warehouse, H12, H15)
    assert_rollups_match(expected_rollup(tcp, http, closes=closes), actual_rollup(warehouse))
    assert expected_heatmap(tcp, closes=closes) == actual_heatmap(warehouse)
    polled = {(r["host"], r["sock_id"]) for r in tcp}
    closed = {(r["host"], r["sock_id"]) for r in closes}
    assert closed - polled, "the simulated hours have short connections no poll saw"
    n = warehouse.query("SELECT sum(n) + sum(n_missing) FROM cohort_hourly WHERE metric = 'retrans_pct' "
                        "AND segment = 'all'").scalar()
    assert int(n) == len(closed | polled)  # polled connections without a close record still count
    missing = warehouse.query("SELECT sum(n_missing), sum(n_zero) FROM cohort_hourly "
                              "WHERE metric = 'inflight_bytes' AND segment = 'all'").rows[0]
    assert int(missing[0]) >= len(closed - polled) and int(missing[1]) == 0


def test_heatmap_has_access_type_segments_matching_an_independent_cidr_match(warehouse, sim_dir, records):
    """Issue 20: the heatmap rollup per access type (the sim's synthetic prefix metadata, looked up
    by the IP-trie dictionary) equals the reference with the longest-prefix match done in Python."""
    import csv
    import ipaddress

    from ccab.cohorts import networks as nw

    tcp, http = records
    rows = list(csv.DictReader((sim_dir / "networks.csv").open()))
    nets = sorted(((ipaddress.ip_network(r["network"]), r["access"]) for r in rows), key=lambda n: -n[0].prefixlen)

    def network_of(prefix: str):
        first = ipaddress.ip_network(prefix, strict=False).network_address
        access = next((a for n, a in nets if n.version == first.version and first in n), "unknown")
        return (f"access:{access}", "", "")

    parsed = nw.read_file(sim_dir / "networks.csv")
    assert nw.load(warehouse, parsed.networks, str(sim_dir / "networks.csv"), parsed.format) == len(rows)
    load(warehouse, sim_dir / "ccab.tcp.v1.jsonl", sim_dir / "ccab.http.v1.jsonl")
    run_window(warehouse, H12, H15)
    actual = actual_heatmap(warehouse)
    assert expected_heatmap(tcp, network_of=network_of) == actual
    by_segment: dict[str, int] = {}
    for k, n in actual.items():
        by_segment[k[8]] = by_segment.get(k[8], 0) + n
    access = {s: n for s, n in by_segment.items() if s.startswith("access:")}
    assert {"access:mobile", "access:fixed"} <= set(access)      # the sim's prefixes have both
    assert sum(access.values()) == by_segment["all"]            # access types partition 'all'
