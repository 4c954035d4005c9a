"""``ccab report`` on judged simulated data: the page holds the decision and its evidence, the
gates, the effect table and valid figures — checked in the HTML and in a real headless Chromium."""

from __future__ import annotations

import html
import re
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


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """A data dir with 2 hours of the tiny scenario loaded, rolled up and judged (one chdb path)."""
    from ccab.base import schema as migrate
    from ccab.base.warehouse import ChdbWarehouse
    from ccab.cohorts.job import run_window
    from ccab.ingest.loader import load_files
    from ccab.judge import judge_window

    sim = tmp_path_factory.mktemp("sim-tiny-report")
    assert cli.main(["sim", "tiny", "--out", str(sim), "--hours", "2", "--workers", "1", "--no-progress"]) == 0
    data_dir = tmp_path_factory.mktemp("report-data")
    wh = ChdbWarehouse(data_dir / "warehouse")
    try:
        migrate.migrate(wh, log=lambda _m: None)
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
        mp.delenv("CCAB_CLICKHOUSE_URL", raising=False)
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
        mp.delenv("CCAB_CLICKHOUSE_URL", raising=False)
        assert cli.main(["report", "--rollout", ROLLOUT, "--from", "2025-11-20T12:00Z", "--to", "2025-11-20T13:00Z",
                         "--out", str(tmp_path / "r"), "--json"]) == 0
        assert cli.main(["report", "--rollout", ROLLOUT, "--from", "2025-11-20T12:30Z"]) == 2
    page = (tmp_path / "r" / "index.html").read_text()
    assert "has not been judged" in page and '<section id="hosts">' in page
    assert len(list((tmp_path / "r").glob("*.png"))) == 10
