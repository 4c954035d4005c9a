"""``ccab report`` on judged simulated data: the page holds the decision and its evidence, the
gates, the effect table and valid figures — checked in the HTML and in a real headless Chromium."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
import shutil
import struct
import subprocess
import zlib
from datetime import datetime, timezone
from pathlib import Path

import pytest
from ccab import cli
from ccab.report import html as h

START = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
END = datetime(2025, 11, 20, 14, tzinfo=timezone.utc)
ROLLOUT = "tst1-tiny"


def _url(data_dir: Path) -> str:
    """The warehouse (a database on the session's warehouse service) of a data dir of ``judged``."""
    return (data_dir / "warehouse.url").read_text()


@pytest.fixture(scope="module")
def judged(tmp_path_factory, tiny_world, migrated_service_database):
    """A data dir with 2 hours of the tiny scenario loaded, rolled up and judged, in a database of
    the session's warehouse service."""
    from ccab.base.warehouse import ServerWarehouse
    from ccab.cohorts.job import run_window
    from ccab.ingest.loader import load_files
    from ccab.judge import judge_window

    sim = tiny_world
    data_dir = tmp_path_factory.mktemp("report-data")
    (data_dir / "warehouse.url").write_text(migrated_service_database())
    wh = ServerWarehouse(_url(data_dir))
    try:
        assert not load_files(wh, [sim / "ccab.tcp.v1.jsonl", sim / "ccab.http.v1.jsonl"]).dead
        run_window(wh, START, END)
        report = judge_window(wh, START, END, report_url=f"file://{data_dir}/reports/{{rollout_id}}/index.html")
    finally:
        wh.close()
    return data_dir, report


@pytest.fixture(scope="module")
def written(judged):
    """The report written through the CLI into its default folder."""
    data_dir, report = judged
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CCAB_DATA_DIR", str(data_dir))
        mp.setenv("CCAB_CLICKHOUSE_URL", _url(data_dir))
        assert cli.main(["report", "--rollout", ROLLOUT]) == 0
        assert cli.main(["report", "--rollout", "no-such-rollout"]) == 1
    out = data_dir / "reports" / ROLLOUT
    return out, (out / "index.html").read_text(), report


def png_ok(path: Path) -> tuple[int, int]:
    """Width and height of a valid PNG (signature, IHDR, every chunk's CRC, IEND)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, kinds = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in {kind!r}"
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    return struct.unpack(">II", data[16:24])


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_report_shows_decision_reasons_gates_and_effects(written):
    out, page, report = written
    text = text_of(page)
    assert f"Canary report — {ROLLOUT}" in text
    verdicts = report.verdicts
    assert {v.treatment_arm for v in verdicts} == {"bbr1", "bbr2"}
    for v in verdicts:
        assert f'data-arm="{v.treatment_arm}" data-decision="{v.decision}"' in page
        for reason in v.reasons:
            assert reason in text, reason
        for gate in v.gates_failed:
            assert gate in text
    # bbr1 has one host: the arm_hosts gate fails and its decision is no_decision, never a pass
    assert {v.treatment_arm: v.decision for v in verdicts}["bbr1"] == "no_decision"
    for section in ("decision", "gates", "guardrails", "distributions", "heatmaps", "effects", "hosts",
                    "alerts", "how-to-read"):
        assert f'<section id="{section}">' in page, section
    for gate in ("arm_hosts", "host_completeness", "cc_compliance", "sampling_rate"):
        assert gate in text
    # every judged metric x statistic of the informational family has a row
    info = {(r.metric, r.statistic) for j in report.rollouts for r in j.results if r.role == "info"}
    assert info
    for metric, statistic in info:
        assert re.search(rf"<td>{re.escape(metric)}</td><td>{re.escape(html.escape(statistic))}</td>", page), \
            (metric, statistic)
    for kw in ("inconclusive by design", "host-clustered", "permutation"):
        assert kw in text.lower()


def test_report_figures_exist_are_valid_pngs_and_are_referenced_relatively(written):
    out, page, _ = written
    srcs = re.findall(r'<img src="([^"]+)"', page)
    names = {f"{k}_{m}.png" for k in ("pdf", "cdf") for m in ("retrans_pct", "inflight_bytes", "rtt_us", "goodput_bps")}
    names |= {"heatmap_rtt_retrans.png", "heatmap_rtt_inflight.png"}
    assert set(srcs) == names
    for src in srcs:
        assert "/" not in src  # next to index.html: the folder can move
        w, hgt = png_ok(out / src)
        assert w > 300 and hgt > 200


def test_per_host_breakdown_lists_every_host(written, judged):
    out, page, _ = written
    section = page.split('<section id="hosts">')[1].split("</section>")[0]
    rows = re.findall(r"<tr[^>]*><td>", section)
    assert len(rows) == 5  # 2 control + 2 bbr2 + 1 bbr1 hosts in the tiny scenario


def test_alerts_point_at_the_report_folder(written):
    out, page, report = written
    assert report.alerts, "the tiny scenario should raise at least one alert"
    for a in report.alerts:
        assert a.report_url == f"file://{out}/index.html"
        assert a.alert_id in page


def test_render_page_escapes_and_links_sections():
    page = h.render_page("a <b> & c", [h.Section("One", h.table(["x"], [["<script>"], [h.Cell("ok", "cell-bad")]]),
                                                 "one"),
                                       h.Section("Two", "plain <i>text</i>", "two")], subtitle="sub")
    assert "<script>" not in page and "&lt;script&gt;" in page and "plain &lt;i&gt;" in page
    assert '<a href="#one">One</a>' in page and '<section id="two">' in page
    assert '<td class="cell-bad">ok</td>' in page
    with pytest.raises(ValueError, match="duplicate"):
        h.render_page("t", [h.Section("a", "", "x"), h.Section("b", "", "x")])


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(*args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                           "--no-first-run", "--disable-dev-shm-usage", *args],
                          capture_output=True, text=True, timeout=timeout, check=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs Debian's chromium)")
def test_report_renders_in_headless_chromium(written, tmp_path):
    out, _, report = written
    url = (out / "index.html").as_uri()
    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", url).stdout
    text = text_of(dom)
    for v in report.verdicts:
        assert f'data-decision="{v.decision}"' in dom
    for heading in ("Decision per treatment arm", "Data-quality gates", "Guardrails", "Distributions per arm",
                    "Heatmaps against RTT", "All effects", "Per-host breakdown", "How to read this report"):
        assert heading in text, heading
    assert len(re.findall(r"<img ", dom)) == 10
    shot = tmp_path / "report.png"
    _chromium(f"--screenshot={shot}", "--window-size=1400,4000", "--virtual-time-budget=5000", url)
    w, hgt = png_ok(shot)
    assert (w, hgt) == (1400, 4000)
    from PIL import Image

    with Image.open(shot) as im:
        colours = im.convert("RGB").resize((140, 400)).getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) a single colour"


def test_window_without_a_judgement_still_shows_the_data(judged, tmp_path, capsys):
    data_dir, _ = judged
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CCAB_DATA_DIR", str(data_dir))
        mp.setenv("CCAB_CLICKHOUSE_URL", _url(data_dir))
        assert cli.main(["report", "--rollout", ROLLOUT, "--from", "2025-11-20T12:00Z", "--to", "2025-11-20T13:00Z",
                         "--out", str(tmp_path / "r"), "--json"]) == 0
        assert cli.main(["report", "--rollout", ROLLOUT, "--from", "2025-11-20T12:30Z"]) == 2
    page = (tmp_path / "r" / "index.html").read_text()
    assert "has not been judged" in page and '<section id="hosts">' in page
    assert len(list((tmp_path / "r").glob("*.png"))) == 10


# --- every number the report shows is the judge's stored number (issue #17) --------------------

class _Tables(HTMLParser):
    """Per <section id>, its tables as rows of cell texts; a ``<span class="sub">`` inside a
    cell starts a new part (``cell = [main, sub, ...]``)."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, list[list[list[list[str]]]]] = {}
        self.section = ""
        self.row = self.cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id", "")
        elif tag == "table":
            self.sections.setdefault(self.section, []).append([])
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = [""]
        elif tag == "span" and "sub" in (a.get("class") or "").split() and self.cell is not None:
            self.cell.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append([" ".join(p.split()) for p in self.cell])
            self.cell = None
        elif tag == "tr" and self.row is not None:
            if self.row and self.sections.get(self.section):
                self.sections[self.section][-1].append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[-1] += data


_NUM = re.compile(r"[+\-−]?\d[\d,]*(?:\.\d+)?(?:e[+\-]?\d+)?")


def _numbers(text: str) -> list[str]:
    return _NUM.findall(text)


def _near(token: str, want: float) -> bool:
    """``token`` (as shown) is ``want`` rounded: within half its last digit, or 0.5 % (3 significant)."""
    value = float(token.replace(",", "").replace("−", "-"))
    mantissa = token.split("e")[0]
    half = 0.5 * 10 ** -(len(mantissa.split(".")[1]) if "." in mantissa else 0)
    if "e" in token:
        half = abs(value) * 0.05
    return abs(value - want) <= max(half * 1.001, 0.005 * abs(want))


def _shown(metric: str, statistic: str, v: float) -> float | None:
    """What a stored value is on screen, from the metric's definition (not the report's code)."""
    from ccab.base.vocabulary import get as get_metric

    if v is None or v != v:
        return None
    if statistic.startswith("share_above"):
        return 100 * v  # % of connections
    if statistic == "shift":
        return None
    return v / get_metric(metric).scale  # stored in the metric's own unit (ratios too)


def _effect_shown(statistic: str, v: float) -> float:
    return v if statistic == "shift" else 100 * v  # KS distance; % or pp


def _check_value(cell: str, metric: str, statistic: str, v: float, what: str) -> None:
    want = _shown(metric, statistic, v)
    if want is None:
        assert cell in ("–", ""), (what, cell)
        return
    nums = _numbers(cell)
    assert nums and _near(nums[0], want), f"{what}: shown {cell!r}, judge stored {v} (expected ≈ {want:.4g})"


def _check_effect(cells: list[str], r: dict, what: str) -> None:
    """The effect, its interval with its own level, as stored."""
    effect, interval = cells
    st = r["statistic"]
    if r["estimate"] is None or r["estimate"] != r["estimate"]:
        vt, vc = r["value_treatment"], r["value_control"]
        if vc == 0 and vt is not None and vt == vt:  # from a zero base: the difference (issue 29)
            assert effect.endswith(" from 0") and _numbers(effect), (what, effect, vt)
        else:
            assert effect in ("–", ""), (what, effect)
        return
    nums = _numbers(effect)
    assert nums and _near(nums[0], _effect_shown(st, r["estimate"])), (what, effect, r["estimate"])
    if st == "shift" or r["ci_low"] is None or r["ci_low"] != r["ci_low"]:
        return
    lo, hi, level = _numbers(interval)[:3]
    assert _near(lo, _effect_shown(st, r["ci_low"])) and _near(hi, _effect_shown(st, r["ci_high"])), \
        (what, interval, r["ci_low"], r["ci_high"])
    want_level = 100 * (1 - 2 * r["alpha_look"]) if r["role"] == "guardrail" else 95
    assert _near(level, want_level) and interval.endswith("%"), (what, interval, want_level)


def test_every_number_in_the_effect_tables_is_the_judges_stored_result(written, judged):
    """Guardrails, informational, shift and segment tables against `judge_results`, read back
    from the warehouse with SQL (the report's window): values in the metric's unit (a ratio such
    as retrans_pct is a percentage once, not ×100 twice), effects, intervals with their own
    confidence level (a guardrail's one-sided test shows its 1 − 2α interval, never as "95 %"),
    p and q, outcome and host counts."""
    from ccab.base.warehouse import ServerWarehouse

    out, page, report = written
    data_dir, _ = judged
    wh = ServerWarehouse(_url(data_dir))
    try:
        results = wh.query(
            """SELECT * FROM judge_results FINAL WHERE rollout_id = {r:String}
               AND window_end = (SELECT max(window_end) FROM judge_verdicts FINAL WHERE rollout_id = {r:String})""",
            params={"r": ROLLOUT}).dicts()
    finally:
        wh.close()
    assert results and {r["role"] for r in results} >= {"guardrail", "info", "segment"}
    parser = _Tables()
    parser.feed(page)
    sections = parser.sections

    # Guardrails: one row per metric x statistic x arm
    [guard] = sections["guardrails"]
    header = [c[0] for c in guard[0]]
    assert "95% CI" not in header and "interval (level)" in header
    rows = {(r[0][0], r[1][0], r[2][0]): r for r in guard[1:]}
    checked = 0
    for r in (r for r in results if r["role"] == "guardrail"):
        row = rows[(r["metric"], r["statistic"], r["treatment_arm"])]
        what = f"guardrail {r['metric']} {r['statistic']} {r['treatment_arm']}"
        _check_value(row[3][0], r["metric"], r["statistic"], r["value_control"], what + " control")
        _check_value(row[4][0], r["metric"], r["statistic"], r["value_treatment"], what + " arm")
        _check_effect([row[5][0], row[6][0]], r, what)
        if r["p_value"] is not None and r["p_value"] == r["p_value"]:
            assert _near(_numbers(row[7][0])[0], r["p_value"]), (what, row[7], r["p_value"])
        assert row[10][0] == r["outcome"].replace("_", " "), (what, row[10])
        assert _numbers(row[11][0])[:2] == [str(r["hosts_treatment"]), str(r["hosts_control"])], (what, row[11])
        checked += 1

    # Informational, shift and segment pivots: per key, the control value, then per arm
    # (value, effect [interval], q (p), outcome)
    pivots: dict[tuple, list[tuple[list[str], list]]] = {}
    for table in sections["effects"]:
        groups, header, body = table[0], [c[0] for c in table[1]], table[2:]
        with_segment = header[2] == "segment"
        arms = [g[0].removesuffix(" vs control") for g in groups if g[0].endswith(" vs control")]
        off = 3 if with_segment else 2
        for row in body:
            key = (row[0][0], row[1][0], row[2][0] if with_segment else "all")
            pivots.setdefault(key, []).append((arms, row, off))
    for r in (r for r in results if r["role"] in ("info", "shift", "segment")):
        key = (r["metric"], r["statistic"], r["segment"])
        assert key in pivots, f"{key} ({r['role']}) is not in the report"
        for arms, row, off in pivots[key]:
            what = f"{r['role']} {key} {r['treatment_arm']}"
            if r["value_control"] is not None and r["value_control"] == r["value_control"]:
                # one control column per row: every comparison that has a control value shows it
                _check_value(row[off][0], r["metric"], r["statistic"], r["value_control"], what + " control")
            i = off + 1 + 4 * arms.index(r["treatment_arm"])
            _check_value(row[i][0], r["metric"], r["statistic"], r["value_treatment"], what)
            effect = row[i + 1]
            _check_effect([effect[0], effect[1] if len(effect) > 1 else ""], r, what)
            q, p = row[i + 2][0], row[i + 2][1]
            if r["q_value"] is not None and r["q_value"] == r["q_value"]:
                assert _near(_numbers(q)[0], r["q_value"]), (what, q, r["q_value"])
            if r["p_value"] is not None and r["p_value"] == r["p_value"]:
                assert _near(_numbers(p)[0], r["p_value"]), (what, p, r["p_value"])
            assert row[i + 3][0] == r["outcome"].replace("_", " "), (what, row[i + 3])
            checked += 1
    assert checked >= len(results)


def test_every_number_in_the_host_table_is_the_rollups(written, judged):
    """Per host: connections and retransmitted % of bytes as the rollups hold them."""
    from ccab.base.warehouse import ServerWarehouse

    out, page, _ = written
    data_dir, _ = judged
    wh = ServerWarehouse(_url(data_dir))
    try:
        want = {r["host"]: r for r in wh.query(
            """SELECT host, sum(n) AS connections, 100 * sum(ratio_num) / sum(ratio_den) AS retrans_pct
               FROM cohort_hourly WHERE rollout_id = {r:String} AND metric = 'retrans_pct' AND segment = 'all'
                 AND hour >= (SELECT max(window_start) FROM judge_verdicts FINAL WHERE rollout_id = {r:String})
                 AND hour < (SELECT max(window_end) FROM judge_verdicts FINAL WHERE rollout_id = {r:String})
               GROUP BY host""", params={"r": ROLLOUT}).dicts()}
    finally:
        wh.close()
    parser = _Tables()
    parser.feed(page)
    [hosts] = parser.sections["hosts"]
    assert len(hosts) - 1 == len(want)
    for row in hosts[1:]:
        w = want[row[3][0]]
        assert int(row[4][0].replace(",", "")) == w["connections"], row
        assert _near(row[5][0], w["retrans_pct"]), (row[3][0], row[5][0], w["retrans_pct"])


def test_a_rollout_with_hosts_assigned_but_nothing_rolled_up_gets_a_page_saying_so(warehouse_env, tmp_path, capsys):
    """The first minutes of a rollout (the soak's analysts, issue 28): its assignments are loaded,
    no hour is rolled up. The report says what exists and when it fills in (exit 0); an id the
    warehouse knows nothing of is still an error (exit 1)."""
    import json

    def assignment(host: str, ms: int) -> dict:
        return {"schema": "assignment/1", "rollout_id": "early-1", "generation": 1, "pop": "tyo1", "host": host,
                "arm": "bbr2", "cc": "bbr2", "qdisc": None, "issued_at_ms": ms, "signature": "c2ln"}

    path = tmp_path / "assignments.jsonl"
    path.write_text("".join(json.dumps(assignment(h, 1763769600000 + i * 1000)) + "\n" for i, h in enumerate(("h1", "h2"))))
    assert cli.main(["load", str(path)]) == 0
    capsys.readouterr()
    assert cli.main(["report", "--rollout", "early-1", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("early-1: not rolled up yet: 2 host(s) in tyo1 assigned between 2025-11-22 00:00")
    page = (tmp_path / "r" / "index.html").read_text()
    assert "Nothing to show yet" in page and "no hour of their data is rolled up yet" in page
    assert cli.main(["report", "--rollout", "early-1", "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rollout_id"] == "early-1" and not doc["judged"] and doc["pending"] and doc["decisions"] == {}
    assert cli.main(["report", "--rollout", "early-2", "--out", str(tmp_path / "x")]) == 1
    assert "no assignments, rollups or judge results for rollout 'early-2'" in capsys.readouterr().err
