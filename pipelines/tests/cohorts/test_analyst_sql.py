"""The analysts' parameterized views (sql/views/) on simulated data, against the reference.

Each view is checked for what its header promises (grain, totals, units), with numbers computed
from the records independently of the SQL; the README examples must run as written.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from datetime import datetime, timezone

import numpy as np
import pytest
from ccab import cli
from ccab.base.schema import REPO_ROOT
from ccab.base.warehouse import WarehouseError
from ccab.base import bins
from ccab.cohorts.views import VIEWS_DIR, install_views, view_files
from cohort_reference import MIB, ZERO_BIN, connections, hour_str, prefix_classes, read_jsonl

WINDOW = "t_from = '2025-11-20 00:00:00', t_to = '2025-11-21 00:00:00'"
ALL = f"pop = '', rollout_id = '', {WINDOW}"


@pytest.fixture(scope="module")
def sim_dir(tiny_world):
    return tiny_world  # the shared `ccab sim tiny --hours 2` (conftest)


@pytest.fixture(scope="module")
def records(sim_dir):
    return read_jsonl(sim_dir / "ccab.tcp.v1.jsonl"), read_jsonl(sim_dir / "ccab.http.v1.jsonl")


@pytest.fixture
def wh(tiny_warehouse):
    return tiny_warehouse  # the tiny world loaded, rolled up, views installed (conftest)


def test_every_view_file_is_one_documented_query():
    files = view_files()
    assert set(files) == {"cohort_quantiles", "cohort_pdf", "cohort_cdf", "cohort_heatmap",
                          "cohort_goodput_by_rtt_class", "cohort_network_pdf", "cohort_asn_table",
                          "cohort_goodput_by_client_speed"}
    for name, path in files.items():
        text = path.read_text()
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        assert ";" not in body, f"{path}: one query per file, no ';'"
        header = text.split("\n\n")[0]
        assert header.startswith(f"-- {name}:"), path
        assert "Grain:" in header and "Parameters:" in header, f"{path}: header must state the grain and parameters"


def test_heatmap_counts_each_connection_once_in_its_cell(wh, records):
    tcp, _ = records
    rows = wh.query(f"SELECT * FROM cohort_heatmap({ALL}, pair = 'rtt_us:retrans_pct', segment = 'all', "
                    "bins_per_octave = 2)").dicts()
    got = Counter({(r["arm"], r["x_bin"], r["y_bin"]): r["connections"] for r in rows})
    want: Counter = Counter()
    for c in connections(tcp):
        if c["retrans_pct"] is None:
            continue
        x = math.floor(math.log2(c["rtt_us"]) * 2)
        y = ZERO_BIN if c["retrans_pct"] == 0 else math.floor(math.log2(c["retrans_pct"]) * 2)
        want[(c["arm"], x, y)] += 1
    assert got == want
    per_arm = defaultdict(float)
    for r in rows:
        per_arm[r["arm"]] += r["share_of_arm"]
        if r["y_bin"] != ZERO_BIN:
            assert r["y_lo"] <= r["y_hi"] == pytest.approx(r["y_lo"] * 2 ** 0.5)
        else:
            assert r["y_lo"] == r["y_hi"] == 0
    assert all(v == pytest.approx(1) for v in per_arm.values())


def test_pdf_and_cdf_of_a_metric(wh, records):
    tcp, _ = records
    pdf = wh.query(f"SELECT * FROM cohort_pdf({ALL}, metric = 'rtt_us', segment = 'all', bins_per_octave = 4)").dicts()
    values = defaultdict(list)
    for c in connections(tcp):
        values[c["arm"]].append(c["rtt_us"])
    for arm, v in values.items():
        rows = [r for r in pdf if r["arm"] == arm]
        want = Counter(np.floor(np.log2(np.asarray(v, dtype=float)) * 4).astype(int).tolist())
        assert {r["bin"]: r["values"] for r in rows} == dict(want)
        assert sum(r["share"] for r in rows) == pytest.approx(1)
        for r in rows:
            assert r["density_per_decade"] == pytest.approx(r["share"] / math.log10(r["value_hi"] / r["value_lo"]))
    cdf = wh.query(f"SELECT * FROM cohort_cdf({ALL}, metric = 'retrans_pct', segment = 'all', bins_per_octave = 8)").dicts()
    for arm in values:
        rows = [r for r in cdf if r["arm"] == arm]
        cum = [r["cum_share"] for r in rows]
        assert cum == sorted(cum) and cum[-1] == pytest.approx(1)
        retrans = [c["retrans_pct"] for c in connections(tcp) if c["arm"] == arm and c["retrans_pct"] is not None]
        assert rows[0]["bin"] == ZERO_BIN and rows[0]["cum_share"] == pytest.approx(retrans.count(0) / len(retrans))
        # the CDF at a bin's upper edge is the share of values below that edge
        for r in rows[1::7]:
            assert r["cum_share"] == pytest.approx(np.mean(np.asarray(retrans) < r["value_hi"]))


def test_goodput_by_rtt_class(wh, records):
    tcp, http = records
    classes = prefix_classes(tcp)
    want: Counter = Counter()
    for r in http:
        if r["body_bytes_sent"] >= MIB and r["request_time_ms"] > 0:
            want[(r["arm"], classes.get((hour_str(r["ts_ms"]), r["pop"], r["peer_prefix"]), "rtt:unknown"))] += 1
    rows = wh.query(f"SELECT * FROM cohort_goodput_by_rtt_class({ALL})").dicts()
    assert Counter({(r["arm"], r["rtt_class"]): r["requests"] for r in rows}) == want
    order = [r["rtt_class_lo_ms"] for r in rows]
    known = [x for x in order if x is not None]
    assert known == sorted(known) and order[len(known):] == [None] * (len(order) - len(known))
    for r in rows:
        assert r["goodput_bps_p10"] <= r["goodput_bps_p50"] <= r["goodput_bps_p90"]


def test_quantiles_view_means_and_ratios(wh, records):
    tcp, _ = records
    rows = {r["arm"]: r for r in wh.query(
        f"SELECT * FROM cohort_quantiles({ALL}, metric = 'retrans_pct', segment = 'all')").dicts()}
    for arm, r in rows.items():
        conns = [c for c in connections(tcp) if c["arm"] == arm and c["retrans_pct"] is not None]
        v = np.array([c["retrans_pct"] for c in conns])
        assert r["n"] == len(v) and r["hosts"] == len({c["host"] for c in conns})
        assert r["mean"] == pytest.approx(v.mean(), rel=1e-9)
        assert r["zero_share"] == pytest.approx(np.mean(v == 0))
        assert r["share_above_50pct"] == pytest.approx(np.mean(v > 50))
        assert r["ratio"] == pytest.approx(100 * sum(c["bytes_retrans"] for c in conns) / sum(c["bytes_sent"] for c in conns))
        assert abs(r["p50_nonzero"] / bins.exact_quantile(v[v > 0], 0.5) - 1) <= bins.MAX_QUANTILE_REL_ERROR


def test_bad_bins_per_octave_is_refused_with_a_message(wh):
    with pytest.raises(WarehouseError, match="bins_per_octave must"):
        wh.query(f"SELECT * FROM cohort_pdf({ALL}, metric = 'rtt_us', segment = 'all', bins_per_octave = 3)")


def test_readme_examples_run_as_written(wh):
    """Every ```sql block of sql/README.md is a query against the views; it must execute."""
    text = (REPO_ROOT / "sql" / "README.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
    views = set(view_files())
    used = set()
    for sql in blocks:
        wh.query(sql)
        used |= {v for v in views if re.search(rf"\b{v}\(", sql)}
    assert used == views, f"views without an example in sql/README.md: {views - used}"


def test_install_views_reports_the_broken_file(wh, tmp_path):
    (tmp_path / "broken_view.sql").write_text("SELECT nope FROM nowhere WHERE x = {x:String}")
    with pytest.raises(WarehouseError, match="broken_view"):
        install_views(wh, tmp_path)
    assert VIEWS_DIR.is_dir()


def _goodput(r):
    return r["body_bytes_sent"] * 8 / (r["request_time_ms"] / 1000) if r["request_time_ms"] > 0 else None


def test_goodput_by_client_speed_bands_from_the_pre_period_only(wh, records):
    """Issue 18: prefixes banded by their median goodput in the pre-period (hour 12 here), the
    window's (hour 13) goodput per band x arm; same bands as the judge's heterogeneity."""
    from ccab.judge.data import SPEED_BANDS_MBPS, prefix_speed_bands

    _, http = records
    h12, h13 = 1763640000000, 1763643600000
    pre: dict[str, list[float]] = defaultdict(list)
    for r in http:
        g = _goodput(r)
        if h12 <= r["ts_ms"] < h13 and r["body_bytes_sent"] >= 100_000 and g and r["peer_prefix"]:
            pre[r["peer_prefix"]].append(g)
    band_of = {}
    for prefix, vals in pre.items():
        if len(vals) >= 3:
            m = sorted(vals)[len(vals) // 2]   # quantileExact(0.5): the element at floor(n / 2)
            band_of[prefix] = next(name for name, lo, hi in SPEED_BANDS_MBPS if lo <= m / 1e6 < hi)
    assert band_of == prefix_speed_bands(wh, "tst1", datetime(2025, 11, 20, 12, tzinfo=timezone.utc),
                                         datetime(2025, 11, 20, 13, tzinfo=timezone.utc))
    expected: dict[tuple, list[float]] = defaultdict(list)
    for r in http:
        g = _goodput(r)
        if h13 <= r["ts_ms"] < h13 + 3600_000 and r["body_bytes_sent"] >= 100_000 and g and r["peer_prefix"] in band_of:
            expected[(band_of[r["peer_prefix"]], r["arm"])].append(g)
    rows = wh.query("""SELECT speed_band, arm, requests, goodput_bps_p50, goodput_bps_gmean
                       FROM cohort_goodput_by_client_speed(pop = 'tst1', rollout_id = '',
                            pre_from = '2025-11-20 12:00:00', pre_to = '2025-11-20 13:00:00',
                            t_from = '2025-11-20 13:00:00', t_to = '2025-11-20 14:00:00')""").rows
    assert len({b for b, *_ in rows}) >= 2
    assert {(b, a): n for b, a, n, *_ in rows} == {k: len(v) for k, v in expected.items()}
    for band, arm, _n, p50, gmean in rows:
        vals = sorted(expected[(band, arm)])
        assert p50 == pytest.approx(vals[len(vals) // 2], rel=1e-9)
        assert gmean == pytest.approx(math.exp(np.mean(np.log(vals))), rel=1e-9)
    with pytest.raises(WarehouseError, match="pre-treatment data only"):   # never the window's own outcomes
        wh.query("""SELECT * FROM cohort_goodput_by_client_speed(pop = '', rollout_id = '',
                    pre_from = '2025-11-20 12:00:00', pre_to = '2025-11-20 14:00:00',
                    t_from = '2025-11-20 13:00:00', t_to = '2025-11-20 14:00:00')""")
