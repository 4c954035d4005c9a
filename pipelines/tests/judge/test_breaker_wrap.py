"""The circuit breaker on counters whose sum passes 2^64 (issue 29): ``retrans_by_minute`` sums
in Float64, as the rollups do, so one contract-valid sample near 2^64 cannot wrap a minute's
sums into a small number and hide (or fake) a trip. Real chdb, records through the loader."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ccab.judge.core import breaker_trip
from ccab.judge.data import retrans_by_minute
from ccab.judge.model import Breaker
from ccab.ingest.loader import load_files
from factories import BASE_TS_MS, line, tcp_sample

MINUTE0 = BASE_TS_MS // 60_000 * 60_000


def _samples(minutes: int, per_arm: int) -> list[dict]:
    out, i = [], 0
    for m in range(minutes):
        for arm, retrans in (("control", 10_000), ("bbr2", 84_000)):  # 1 % vs 8.4 % of 1 MB
            for k in range(per_arm):
                i += 1
                out.append(tcp_sample(i, arm=arm, rollout_id="wrap", ts_ms=MINUTE0 + m * 60_000 + k,
                                      sock_id=f"{arm}-{m}-{k}", bytes_sent=1_000_000, bytes_retrans=retrans))
    return out


def test_a_sample_near_2_64_does_not_wrap_the_breakers_sums(warehouse, tmp_path):
    recs = _samples(minutes=3, per_arm=5)
    # one long connection in bbr2's middle minute whose counters bring the minute's sums to
    # exactly 2^64 (+1000 sent): UInt64 sums wrapped them to (0, 1000), a 0 % minute
    others_retrans = 4 * 84_000
    big = tcp_sample(999, arm="bbr2", rollout_id="wrap", ts_ms=MINUTE0 + 60_000 + 30_000, sock_id="long",
                     bytes_retrans=2**64 - others_retrans, bytes_sent=2**64 - 4 * 1_000_000 + 1000)
    recs = [r for r in recs if r["sock_id"] != "bbr2-1-4"] + [big]
    path = tmp_path / "wrap.jsonl"
    path.write_bytes(b"\n".join(line(r) for r in recs) + b"\n")
    rep = load_files(warehouse, [path])
    assert rep.dead_total == 0 and rep.inserted == {"tcp_samples": len(recs)}, rep

    start = datetime.fromtimestamp(MINUTE0 / 1000, timezone.utc)
    minutes = retrans_by_minute(warehouse, "tyo1", "wrap", start, start + timedelta(minutes=3))
    sums = {(m[-8:-3], arm): (x, y) for m, arm, x, y, _ in minutes}
    mid = start.strftime("%H:") + f"{start.minute + 1:02d}"
    x, y = sums[(mid, "bbr2")]
    exact_x, exact_y = 2**64, 2**64 + 1000  # Σ over the minute's five samples, exactly
    assert abs(x - exact_x) / exact_x < 1e-12 and abs(y - exact_y) / exact_y < 1e-12, (x, y)

    # every minute of bbr2 is 8.4 % (or, with the long connection, ~100 %) vs control's 1 %:
    # the breaker trips over all three minutes; with wrapped sums the middle one read 0 %
    trip = breaker_trip(minutes, Breaker(ratio=3.0, minutes=3, min_samples=5), "bbr2", "control")
    assert trip is not None and trip.minutes == 3, minutes
