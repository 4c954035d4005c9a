"""The vocabulary, defined once: metrics (name, unit, grain, source, where they are shown), the
statistics the judge can compute for each, which direction hurts users, severities, segments.

The SQL in ``cohorts/sql/`` computes the metrics; this registry says what they mean. A test checks
the two agree (every metric here appears in the rollup of simulated data, and nothing else does).
Plans, the judge, alerts, plots, the dashboards' metric picker and the reports' figures all read
these names from here: adding a metric is an entry here plus its SQL expression
(``cohorts/sql/_connection_values.sql`` and its peers for the other grains).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Grain = Literal["connection", "sample", "request"]
#: where a metric is shown besides the judge and ``ccab plot``: the Canary dashboard's metric
#: picker, the rollout report's distribution figures, the daily report's PDF/CDF figures
Shown = Literal["dashboard", "report", "daily"]
Severity = Literal["page", "ticket", "info"]
SEVERITIES: tuple[str, ...] = ("page", "ticket", "info")


@dataclass(frozen=True)
class Metric:
    """One metric of ``cohort_hourly``.

    Parameters
    ----------
    name : str
        ``cohort_hourly.metric``; the unit is in the name.
    grain : {"connection", "sample", "request"}
        What one value is: a connection's last sample, one tcp sample, one bulk nginx request.
    unit : str
        Human unit for axis labels.
    scale : float
        Divide values by this for display in ``unit`` (e.g. µs -> ms).
    label : str
        Axis label without the unit.
    ratio : tuple of str or None
        For ratio metrics, what ``ratio_num`` / ``ratio_den`` sum (raw units).
    ratio_scale : float
        ``ratio_num / ratio_den * ratio_scale`` is in the metric's own unit.
    description : str
    shown_in : tuple of {"dashboard", "report", "daily"}
        Where the metric is offered or drawn (see :data:`Shown`); the judge and ``ccab plot``
        take every metric.
    """

    name: str
    grain: Grain
    unit: str
    scale: float
    description: str
    label: str = ""
    ratio: tuple[str, str] | None = None
    ratio_scale: float = 1.0
    shown_in: tuple[Shown, ...] = ()

    @property
    def axis_label(self) -> str:
        return f"{self.label or self.name} [{self.unit}]"

    @property
    def is_percent(self) -> bool:
        return self.name.endswith("_pct")


METRICS: tuple[Metric, ...] = (
    Metric("retrans_pct", "connection", "%", 1,
           "retransmitted share of the bytes sent: 100 x bytes_retrans / bytes_sent (missing when "
           "bytes_sent = 0); n_above_50pct counts connections above 50%",
           ratio=("bytes_retrans", "bytes_sent"), ratio_scale=100,
           label="retransmitted bytes", shown_in=("dashboard", "report", "daily")),
    Metric("inflight_bytes", "connection", "KiB", 1024,
           "bytes in flight (Send-Q - notsent), the mean over the connection's samples in the hour "
           "that had data in flight; missing when no sample saw it busy (a gauge, 0 once a transfer "
           "is done: never polled while busy is not 'nothing in flight')",
           label="bytes in flight (busy samples, per connection)", shown_in=("dashboard", "report")),
    Metric("rtt_us", "connection", "ms", 1000, "smoothed RTT (srtt) at the last sample",
           label="smoothed RTT", shown_in=("dashboard", "report", "daily")),
    Metric("min_rtt_us", "connection", "ms", 1000,
           "the kernel's generic minimum RTT (tcpi_min_rtt, ss `minrtt`), every algorithm",
           label="min RTT (tcpi_min_rtt)", shown_in=("dashboard", "daily")),
    Metric("bbr_min_rtt_us", "connection", "ms", 1000,
           "BBR's own min RTT estimate (ss `bbr:(mrtt:...)`), BBR sockets only; never compare it "
           "with min_rtt_us of another algorithm (Dropbox's caveat)",
           label="BBR min RTT (mrtt)"),
    Metric("delivery_rate_bps", "connection", "Mbit/s", 1e6, "the kernel's delivery rate at the last sample",
           label="delivery rate", shown_in=("dashboard",)),
    Metric("rwnd_limited_pct", "connection", "%", 1,
           "share of busy time limited by the receive window: 100 x rwnd_limited_ms / busy_ms",
           ratio=("rwnd_limited_ms", "busy_ms"), ratio_scale=100,
           label="receive-window-limited busy time", shown_in=("dashboard",)),
    Metric("sndbuf_limited_pct", "connection", "%", 1,
           "share of busy time limited by the send buffer: 100 x sndbuf_limited_ms / busy_ms",
           ratio=("sndbuf_limited_ms", "busy_ms"), ratio_scale=100,
           label="send-buffer-limited busy time"),
    Metric("rto_count", "connection", "RTOs", 1,
           "retransmission timeouts of the connection (tcpi_total_rto, kernel >= 6.7; missing on older "
           "kernels and from ss text): the tail that hurts users most",
           label="RTO timeouts per connection"),
    Metric("queue_delay_us", "connection", "ms", 1000,
           "self-inflicted delay: rtt_us - min_rtt_us (srtt above the path's minimum RTT), an "
           "estimate of the standing queue the flow sees at its bottleneck (its own and its "
           "neighbours' data); missing when either RTT is",
           label="queueing delay (srtt - min RTT)", shown_in=("dashboard",)),
    Metric("queue_delay_pct", "connection", "%", 1,
           "queueing delay's share of the RTT: 100 x (rtt_us - min_rtt_us) / rtt_us; the ratio "
           "of sums is the share of all RTT time spent queueing",
           ratio=("queue_delay_us", "rtt_us"), ratio_scale=100,
           label="queueing share of the RTT"),
    Metric("inflight_bytes_per_sample", "sample", "KiB", 1024,
           "bytes in flight in every tcp sample (snapshot-weighted: long flows weigh more)",
           label="bytes in flight (per sample)", shown_in=("daily",)),
    Metric("rtt_us_per_sample", "sample", "ms", 1000, "srtt in every tcp sample (snapshot-weighted)",
           label="smoothed RTT (per sample)"),
    Metric("goodput_bps", "request", "Mbit/s", 1e6,
           "nginx goodput of bulk requests: body_bytes_sent x 8 / request_time (bulk filter: "
           "body >= 1 MiB by default)",
           ratio=("body bits", "request seconds"), ratio_scale=1,
           label="nginx goodput (bulk requests)", shown_in=("dashboard", "report", "daily")),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}

#: heatmap pairs (x:y) in cohort_heatmap_hourly
PAIRS: tuple[str, ...] = ("rtt_us:retrans_pct", "rtt_us:inflight_bytes")

RTT_CLASSES: tuple[str, ...] = ("rtt:0-20ms", "rtt:20-50ms", "rtt:50-100ms", "rtt:100-200ms", "rtt:200ms+",
                                "rtt:unknown")
SIZE_CLASSES: tuple[str, ...] = ("size:<4MiB", "size:4-16MiB", "size:16MiB+")
#: client-network segments (cohorts/networks.py): access type (fixed list), country ('country:JP')
#: and ASN ('asn:<n>', 'asn:other') families, found in the rollups by prefix
ACCESS_SEGMENTS: tuple[str, ...] = ("access:mobile", "access:fixed", "access:satellite", "access:hosting",
                                    "access:unknown")
NETWORK_SEGMENT_FAMILIES: tuple[str, ...] = ("access:", "country:", "asn:")


def shown_in(place: Shown) -> tuple[Metric, ...]:
    """The metrics shown in ``place`` ("dashboard", "report", "daily"), in vocabulary order."""
    return tuple(m for m in METRICS if place in m.shown_in)


def get(name: str) -> Metric:
    """The metric called ``name``; a ValueError listing the known ones otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(BY_NAME)}") from None


#: metrics the judge compares, and which direction hurts users. Excluded on purpose:
#: ``bbr_min_rtt_us`` (BBR sockets only; never comparable with another algorithm's min RTT) and
#: the ``*_per_sample`` metrics (snapshot-weighted: long flows weigh more).
HIGHER_IS_WORSE: dict[str, bool] = {
    "retrans_pct": True,
    "inflight_bytes": True,
    "rtt_us": True,
    "min_rtt_us": True,
    "rwnd_limited_pct": True,
    "sndbuf_limited_pct": True,
    "rto_count": True,
    "queue_delay_us": True,
    "queue_delay_pct": True,
    "delivery_rate_bps": False,
    "goodput_bps": False,
}
JUDGED_METRICS: tuple[str, ...] = tuple(HIGHER_IS_WORSE)
QUANTILES: dict[str, float] = {"p10": 0.10, "p50": 0.50, "p90": 0.90, "p99": 0.99}
SHARE_ABOVE = "share_above:50"


def statistics_of(metric: str) -> tuple[str, ...]:
    """The statistics the judge computes for a metric: ratio of sums (ratio metrics) or mean,
    quantiles, and the share above 50 % for percent metrics."""
    m = get(metric)
    first = ("ratio",) if m.ratio else ("mean",)
    return first + tuple(QUANTILES) + ((SHARE_ABOVE,) if m.is_percent else ())


def check_statistic(metric: str, statistic: str) -> None:
    """ValueError naming what is wrong with a (metric, statistic) pair the judge would be asked for."""
    if metric not in HIGHER_IS_WORSE:
        raise ValueError(f"metric {metric!r} cannot be judged; judged metrics: {', '.join(JUDGED_METRICS)}")
    allowed = statistics_of(metric)
    if statistic not in allowed:
        raise ValueError(f"statistic {statistic!r} is not available for {metric}; use one of: {', '.join(allowed)}")


# ---- effects from a zero base ----------------------------------------------------------------------
# A relative effect (treatment / control − 1) has no value when control's value is 0: 0 % → 11.2 %
# is not "+inf %", and a NaN estimate has no sign. Such an effect is the difference treatment −
# control in the metric's own unit, and its direction is that difference's sign.

def _finite(x) -> bool:
    return isinstance(x, (int, float)) and x == x and x not in (float("inf"), float("-inf"))


def zero_base_difference(estimate, value_treatment, value_control) -> float | None:
    """treatment − control (the metric's stored unit) when the relative estimate is undefined
    because control's value is 0; None otherwise (the relative estimate stands)."""
    if _finite(estimate) or not _finite(value_treatment) or value_control != 0:
        return None
    return float(value_treatment) - float(value_control)


def effect_sign(estimate, value_treatment, value_control) -> int | None:
    """+1 (treatment higher), −1, 0, or None (no estimate and no zero-base difference)."""
    d = estimate if _finite(estimate) else zero_base_difference(estimate, value_treatment, value_control)
    if d is None:
        return None
    return (d > 0) - (d < 0)


def zero_base_text(metric: str, statistic: str, estimate, value_treatment, value_control) -> str | None:
    """'+11.2 % from 0' / '+2.3 ms from 0' for a zero-base effect (the difference in the metric's
    display unit); None when the relative estimate stands."""
    d = zero_base_difference(estimate, value_treatment, value_control)
    if d is None:
        return None
    if statistic.startswith("share_above"):
        return f"{100 * d:+.2f} pp from 0"
    m = get(metric)
    return f"{d / m.scale:+.3g} {m.unit} from 0"
