"""Scenario files: typed, validated description of a simulated PoP.

A scenario is YAML. :func:`load_scenario` turns it into frozen dataclasses, validated by pydantic
(each dataclass carries its pydantic config; bounds are the fields' metadata): unknown keys,
wrong types and out-of-range numbers are refused with messages that name the offending field
(``arms[1].hosts: must be >= 1, got -2``). All problems of a file are reported at once.

Units are in the key names (``_ms``, ``_mbps``, ``_kib``, ``_mib``, ``_pct``, ``_bdp``, ``_s``,
``_h``). Distributions of positive quantities are :class:`Dist` (lognormal by default).

The per-algorithm behaviour (:class:`CCModel`) has built-in defaults per congestion control
(:data:`DEFAULT_CC_MODELS`, calibrated to the Dropbox BBRv2 figures, see README.md); a scenario
overrides them globally (``cc_models: {bbr: {...}}``) or per arm (``arms[i].model``), and adds
planted effects per arm (``arms[i].effects``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from ccab.base.yamlschema import path_of
from pydantic import BeforeValidator, ConfigDict, TypeAdapter, ValidationError

# --------------------------------------------------------------------------------------------
# errors and field helpers


class ScenarioError(ValueError):
    """A scenario file is invalid; ``problems`` lists every ``path: message``."""

    def __init__(self, problems: list[str], source: str = "scenario"):
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: invalid scenario\n  " + "\n  ".join(problems))


def _num(default: Any = dataclasses.MISSING, *, ge: float | None = None, gt: float | None = None,
         le: float | None = None, lt: float | None = None, doc: str = "") -> Any:
    """A numeric dataclass field: its bounds (and strictness: no "5", no true) are pydantic's field
    arguments, carried as the field's metadata."""
    meta = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    meta.update(strict=True, description=doc)
    if isinstance(default, (list, dict)):
        raise TypeError("use _opt for mutable defaults")
    return field(default=default, metadata=meta)


def _opt(factory: Any, doc: str = "") -> Any:
    return field(default_factory=factory, metadata={"description": doc})


def _utc_time(value: Any) -> Any:
    """``start``: an ISO-8601 time (or YAML's own timestamp); without a zone it is UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"expected ISO-8601 time like 2025-11-20T00:00:00Z, got {value!r}") from None
    if not isinstance(value, datetime):
        raise ValueError(f"expected ISO-8601 time string, got {type(value).__name__} {value!r}")
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------
# building blocks

DistKind = Literal["lognormal", "pareto", "loguniform", "uniform", "fixed"]


@dataclass(frozen=True)
class Dist:
    """Distribution of a positive quantity, in the unit of the key that holds it.

    ``lognormal``: ``median``, ``sigma`` (of the natural log). ``pareto``: ``scale`` (x_m, the
    minimum) and ``alpha`` (tail index; smaller = heavier). ``loguniform`` / ``uniform``:
    ``low``, ``high``. ``fixed``: ``value``. ``min`` / ``max`` clip every draw.
    """

    dist: DistKind = "lognormal"
    median: float | None = _num(None, gt=0)
    sigma: float = _num(1.0, ge=0)
    scale: float | None = _num(None, gt=0)
    alpha: float = _num(1.5, gt=0)
    low: float | None = _num(None, ge=0)
    high: float | None = _num(None, ge=0)
    value: float | None = _num(None, ge=0)
    min: float | None = _num(None, ge=0)
    max: float | None = _num(None, gt=0)

    def _check(self, path: str) -> list[str]:
        need = {"lognormal": ["median"], "pareto": ["scale"], "loguniform": ["low", "high"],
                "uniform": ["low", "high"], "fixed": ["value"]}[self.dist]
        out = [f"{path}.{k}: required for dist {self.dist!r}" for k in need if getattr(self, k) is None]
        if self.dist == "loguniform" and self.low is not None and self.low <= 0:
            out.append(f"{path}.low: must be > 0 for loguniform, got {self.low}")
        if self.low is not None and self.high is not None and self.high < self.low:
            out.append(f"{path}.high: must be >= low ({self.low}), got {self.high}")
        if self.min is not None and self.max is not None and self.max < self.min:
            out.append(f"{path}.max: must be >= min ({self.min}), got {self.max}")
        return out


def _ln(median: float, sigma: float, lo: float | None = None, hi: float | None = None) -> Dist:
    return Dist(dist="lognormal", median=median, sigma=sigma, min=lo, max=hi)


@dataclass(frozen=True)
class RandomLoss:
    """Non-congestive (random) packet loss of a client: mostly zero, with a heavy tail."""

    zero_share: float = _num(0.8, ge=0, le=1, doc="share of connections without random loss")
    pct: Dist = _opt(lambda: _ln(0.2, 1.0, 0.001, 20.0), "loss % when there is some")


@dataclass(frozen=True)
class ClientClass:
    """A class of client prefixes (access type x distance); prefixes draw their medians here."""

    name: str
    share: float = _num(ge=0, doc="share of prefixes' traffic in this class")
    rtt_ms: Dist = _opt(lambda: _ln(20.0, 0.4, 2.0, 400.0), "base (propagation) RTT, ms")
    bandwidth_mbps: Dist = _opt(lambda: _ln(20.0, 1.0, 0.5, 1000.0), "bottleneck bandwidth, Mbit/s")
    buffer_bdp: Dist = _opt(lambda: _ln(1.0, 0.8, 0.05, 20.0), "bottleneck buffer, in BDPs")
    random_loss: RandomLoss = _opt(RandomLoss)
    ipv6_share: float = _num(0.3, ge=0, le=1)
    #: access type (mobile|fixed|satellite|hosting); '' = 'mobile' when the name says so, else
    #: 'fixed'. Mobile paths get variable bandwidth, handover loss bursts and more variable RTT
    #: (sim/model.py ``mobile_paths``), and loss-based senders fill their deep buffers.
    access: str = ""
    #: countries of the class's prefixes in the synthetic prefix metadata (drawn uniformly)
    countries: tuple[str, ...] = ("JP",)

    @property
    def access_type(self) -> str:
        return self.access or ("mobile" if "mobile" in self.name else "fixed")

    def _check(self, path: str) -> list[str]:
        out = []
        if self.access not in ("", "mobile", "fixed", "satellite", "hosting"):
            out.append(f"{path}.access: one of mobile, fixed, satellite, hosting (got {self.access!r})")
        if not self.countries or any(len(c) != 2 or not c.isalpha() or not c.isupper() for c in self.countries):
            out.append(f"{path}.countries: ISO 3166 alpha-2 codes like JP (got {list(self.countries)})")
        return out


@dataclass(frozen=True)
class WithinPrefix:
    """Log-scale SD of a connection's value around its prefix's median."""

    bandwidth: float = _num(0.45, ge=0)
    rtt: float = _num(0.08, ge=0)
    buffer: float = _num(0.3, ge=0)


def _default_classes() -> tuple[ClientClass, ...]:
    return (
        ClientClass("metro-fixed", 0.40, _ln(8.0, 0.35, 2.0, 40.0), _ln(80.0, 0.9, 2.0, 1000.0),
                    _ln(1.2, 0.8, 0.05, 20.0), RandomLoss(0.85, _ln(0.05, 1.0, 0.001, 5.0)), 0.35,
                    "fixed", ("JP",)),
        # cellular: deep per-user buffers (several BDPs, no AQM), slow and variable links
        ClientClass("mobile", 0.30, _ln(45.0, 0.4, 12.0, 300.0), _ln(6.0, 0.9, 0.5, 200.0),
                    _ln(4.0, 0.5, 1.5, 20.0), RandomLoss(0.35, _ln(0.4, 1.0, 0.001, 10.0)), 0.5,
                    "mobile", ("JP",)),
        ClientClass("asia-regional", 0.18, _ln(70.0, 0.3, 25.0, 200.0), _ln(25.0, 1.0, 0.5, 1000.0),
                    _ln(0.8, 0.8, 0.05, 20.0), RandomLoss(0.7, _ln(0.2, 1.0, 0.001, 10.0)), 0.25,
                    "fixed", ("KR", "TW", "HK", "SG")),
        ClientClass("overseas", 0.12, _ln(150.0, 0.25, 80.0, 300.0), _ln(15.0, 1.0, 0.5, 1000.0),
                    _ln(0.5, 0.8, 0.05, 20.0), RandomLoss(0.6, _ln(0.3, 1.0, 0.001, 10.0)), 0.25,
                    "fixed", ("US", "DE", "GB")),
    )


@dataclass(frozen=True)
class Clients:
    """The client population behind the PoP, as /24 (IPv4) and /48 (IPv6) prefixes."""

    prefixes: int = _num(3000, ge=1, le=60000, doc="number of client prefixes")
    popularity_zipf: float = _num(0.8, ge=0, doc="Zipf exponent of prefix popularity within a class")
    classes: tuple[ClientClass, ...] = _opt(_default_classes)
    within_prefix_sigma: WithinPrefix = _opt(WithinPrefix)
    congestion_loss_pct: Dist = _opt(lambda: _ln(0.55, 1.1, 0.005, 4.0),
                                     "loss a Cubic sender meets at the bottleneck, %")
    rwnd_kib: Dist = _opt(lambda: _ln(3072.0, 0.6, 256.0, 16384.0), "client max receive window, KiB")
    small_rwnd_share: float = _num(0.25, ge=0, le=1, doc="share of clients with a small window")
    small_rwnd_kib: Dist = _opt(lambda: _ln(160.0, 0.7, 16.0, 2048.0))


@dataclass(frozen=True)
class Diurnal:
    """Connection arrivals over the day: a cosine between ``trough_ratio`` and 1, peaking at
    ``peak_local_hour`` (local time = UTC + ``utc_offset_h``); or 24 explicit ``hourly_weights``
    (local hours 0..23)."""

    utc_offset_h: float = _num(0.0, ge=-12, le=14)
    peak_local_hour: float = _num(21.0, ge=0, lt=24)
    trough_ratio: float = _num(0.35, gt=0, le=1)
    hourly_weights: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Traffic:
    """Connections and the requests on them."""

    connections_per_host_per_hour: float = _num(4000.0, gt=0, doc="day-average arrivals per host")
    diurnal: Diurnal = _opt(Diurnal)
    bulk_connection_share: float = _num(0.35, ge=0, le=1, doc="connections that download >= 1 MiB")
    requests_per_bulk_connection: float = _num(1.5, ge=1, doc="mean requests on a bulk connection")
    requests_per_small_connection: float = _num(3.0, ge=1, doc="mean requests on other connections")
    bulk_request_share: float = _num(0.7, ge=0, le=1, doc="later requests on a bulk conn that are bulk")
    bulk_response_mib: Dist = _opt(lambda: _ln(3.0, 1.1, 1.0, 512.0), "bulk body size, MiB (>= 1)")
    small_response_kib: Dist = _opt(lambda: _ln(16.0, 1.8, 0.2, 1000.0), "other body sizes, KiB")
    think_time_s: float = _num(2.5, ge=0, doc="mean gap between requests on a connection")
    linger_s: float = _num(6.0, ge=0, doc="mean idle time after the last response before close")
    keepalive_timeout_s: float = _num(65.0, gt=0)
    server_time_ms: Dist = _opt(lambda: _ln(1.5, 1.0, 0.0, 2000.0), "nginx time before first byte")
    notsent_lowat_kib: float = _num(16.0, ge=0, doc="tcp_notsent_lowat; bounds nginx's early finish")
    head_share: float = _num(0.01, ge=0, le=1)
    not_found_share: float = _num(0.01, ge=0, le=1)
    not_modified_share: float = _num(0.04, ge=0, le=1)
    range_share: float = _num(0.15, ge=0, le=1, doc="bulk responses that are 206 Partial Content")
    tcpinfo_missing_share: float = _num(0.002, ge=0, le=1, doc="nginx lines with empty $tcpinfo_*")


@dataclass(frozen=True)
class Sampling:
    """What the collectors keep. A socket is in the tcp sample when the hash of its id falls
    under ``tcp_sample_rate``; it is then sampled at every tick (``interval_s``) it is alive."""

    interval_s: float = _num(10.0, gt=0, doc="ss sampling interval, seconds")
    tcp_sample_rate: float = _num(0.25, gt=0, le=1)
    http_sample_rate: float = _num(1.0, gt=0, le=1)


MetricName = Literal["goodput", "rtt", "retrans", "inflight", "rwnd_limited"]


@dataclass(frozen=True)
class HostEffectSD:
    """Log-scale SD of the per-host random effect on each metric (0 = identical hosts)."""

    goodput: float = _num(0.05, ge=0)
    rtt: float = _num(0.04, ge=0)
    retrans: float = _num(0.12, ge=0)
    inflight: float = _num(0.05, ge=0)
    rwnd_limited: float = _num(0.10, ge=0)


@dataclass(frozen=True)
class HostOverride:
    """Make one host different: client mix (class weight multipliers), traffic, fixed effects
    (log-scale, replacing the random draw)."""

    host: str
    class_weight: dict[str, float] = _opt(dict)
    traffic_factor: float = _num(1.0, gt=0)
    effect: dict[str, float] = _opt(dict)


@dataclass(frozen=True)
class SharedBottleneck:
    """Treatment and control share the PoP's bottleneck (Spang et al., IMC'21): with a share ``s``
    of the PoP's hosts off the first (control) arm, control connections' goodput is multiplied by
    ``exp(−spillover × s)`` (the other arm takes bandwidth from them) and the other arms' by
    ``exp(spillover × (1 − s))`` (they win against control's flows). A full rollout (``s = 1``
    against ``s = 0``) shows only the planted direct effects; the host-level A/B shows them plus
    ``spillover`` at any share."""

    spillover_goodput: float = _num(0.0, ge=0, le=2, doc="log-scale goodput taken per unit treated share")


@dataclass(frozen=True)
class Hosts:
    name_format: str = "edge-{pop}-{index:02d}"
    assignment: Literal["shuffled", "blocks"] = "shuffled"
    traffic_sd: float = _num(0.10, ge=0, doc="log-scale SD of per-host traffic")
    effect_sd: HostEffectSD = _opt(HostEffectSD)
    overrides: tuple[HostOverride, ...] = ()
    arm_of: dict[str, str] = _opt(dict, "host -> arm name, overriding the drawn assignment "
                                        "(what the rollout's simulated actuator applied)")


@dataclass(frozen=True)
class CCModel:
    """How one congestion control turns a client path into outcomes (see model.py).

    Throughput: a weighted mix of a loss-based bound (Reno/CUBIC response to the loss-event
    rate, and under-utilisation of shallow buffers) and a loss-insensitive ``utilization`` of the
    bottleneck. Weight = ``loss_sensitivity``, faded for clients faster than
    ``loss_sensitivity_fade_mbps`` (BBRv2 reacts to loss like Cubic on slow paths only).
    Retransmissions: ``retrans_scale`` x the path's congestion loss, plus random loss, plus
    ``shallow_buffer_retrans_pct`` fading from 0 BDP to 1 BDP of buffer, plus a pathological
    tail. Queue: ``queue_fill`` x min(buffer, ``queue_cap_bdp``) BDPs of standing queue.
    In flight: rate x (srtt + (``inflight_gain`` - 1) x base RTT) -- Little's law plus the extra
    BDPs a sender keeps in flight beyond the queue (BBRv1 ~1.2, BBRv2 slightly below 0).
    """

    utilization: float = _num(0.96, gt=0, le=1)
    loss_sensitivity: float = _num(1.0, ge=0, le=1)
    loss_sensitivity_fade_mbps: float | None = _num(None, gt=0)
    retrans_scale: float = _num(1.0, ge=0)
    shallow_buffer_retrans_pct: float = _num(0.0, ge=0, le=50)
    high_loss_tail_share: float = _num(0.0, ge=0, le=1)
    high_loss_tail_pct: tuple[float, float] = (60.0, 90.0)
    queue_fill: float = _num(0.25, ge=0, le=1)
    queue_cap_bdp: float = _num(1.0, ge=0)
    inflight_gain: float = _num(1.0, ge=0.5, le=5)
    cwnd_headroom: float = _num(1.05, ge=1)
    #: share of a deep, drop-free (cellular) buffer the sender keeps full on mobile paths: a
    #: loss-based sender grows until the buffer overflows (Verizon's LTE drives: Cubic fills it),
    #: a model-based one paces at the bottleneck rate and keeps its usual queue (0)
    deep_buffer_fill: float = _num(0.0, ge=0, le=1)

    def _check(self, path: str) -> list[str]:
        lo, hi = self.high_loss_tail_pct
        if not 0 <= lo <= hi <= 95:
            return [f"{path}.high_loss_tail_pct: need 0 <= low <= high <= 95, got [{lo}, {hi}]"]
        return []


DEFAULT_CC_MODELS: dict[str, CCModel] = {
    "cubic": CCModel(loss_sensitivity=1.0, retrans_scale=1.0, queue_fill=0.2, queue_cap_bdp=2.0,
                     inflight_gain=1.2, cwnd_headroom=1.6, deep_buffer_fill=0.8),
    "reno": CCModel(loss_sensitivity=1.0, retrans_scale=0.9, queue_fill=0.2, queue_cap_bdp=2.0,
                    inflight_gain=0.95, cwnd_headroom=1.05, deep_buffer_fill=0.8),
    "bbr": CCModel(utilization=0.96, loss_sensitivity=0.0, retrans_scale=4.0,
                   shallow_buffer_retrans_pct=6.0, queue_fill=0.85, queue_cap_bdp=1.0,
                   inflight_gain=2.0, cwnd_headroom=1.02),
    "bbr2": CCModel(utilization=0.96, loss_sensitivity=1.0, loss_sensitivity_fade_mbps=15.0,
                    retrans_scale=2.0, shallow_buffer_retrans_pct=0.5, high_loss_tail_share=0.007,
                    high_loss_tail_pct=(60.0, 90.0), queue_fill=0.12, queue_cap_bdp=1.0,
                    inflight_gain=0.8, cwnd_headroom=1.0),
}
KNOWN_CC = tuple(DEFAULT_CC_MODELS)
DEFAULT_CC_VERSION = {"bbr": 1, "bbr2": 2}


@dataclass(frozen=True)
class Segment:
    """A slice of clients by *prefix-level* (pre-treatment) attributes; ranges are [low, high)."""

    classes: tuple[str, ...] = ()
    buffer_bdp: tuple[float, float] | None = None
    bandwidth_mbps: tuple[float, float] | None = None
    rtt_ms: tuple[float, float] | None = None

    def label(self) -> str:
        parts = []
        if self.classes:
            parts.append("class:" + "|".join(self.classes))
        for key in ("buffer_bdp", "bandwidth_mbps", "rtt_ms"):
            rng = getattr(self, key)
            if rng is not None:
                parts.append(f"{key}:[{rng[0]:g},{rng[1]:g})")
        return ",".join(parts) or "all"


@dataclass(frozen=True)
class Effect:
    """A planted change for one arm: ``metric`` x ``factor`` on clients in ``where``, for
    connections starting in [``from_hour``, ``until_hour``) of the scenario."""

    metric: MetricName
    factor: float = _num(gt=0)
    where: Segment = _opt(Segment)
    from_hour: float = _num(0.0, ge=0)
    until_hour: float | None = _num(None, gt=0)


@dataclass(frozen=True)
class Arm:
    name: str
    cc: str
    kernel: str
    hosts: int = _num(ge=1, le=500, doc="number of hosts in this arm")
    cc_version: int | None = _num(None, ge=1, le=3)
    model: dict[str, Any] = _opt(dict, "overrides of the cc model for this arm")
    effects: tuple[Effect, ...] = ()


StatName = Literal[
    "retrans_pct_p50", "retrans_pct_p90", "high_loss_share", "inflight_bytes_p50", "inflight_bytes_busy_p50",
    "rtt_ms_p50",
    "rtt_ms_p90", "min_rtt_ms_p50", "goodput_mbps_p10", "goodput_mbps_p50", "goodput_mbps_p90",
    "rwnd_limited_share", "rwnd_limited_pct",
]


@dataclass(frozen=True)
class Expectation:
    """A target for the realised data (checked by tests, reported in truth.json): ``stat`` of
    ``arm`` (over bulk connections in ``where``), or its ratio to arm ``vs``, within ``range``."""

    stat: StatName
    arm: str
    range: tuple[float, float]
    vs: str | None = None
    where: Segment = _opt(Segment)
    note: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    pop: str
    start: Annotated[datetime, BeforeValidator(_utc_time)]
    duration_h: float = _num(gt=0, le=24 * 31)
    arms: tuple[Arm, ...] = ()
    description: str = ""
    rollout_id: str = ""
    seed: int = _num(1, ge=0)
    local_port: int = _num(443, ge=1, le=65535)
    traffic: Traffic = _opt(Traffic)
    sampling: Sampling = _opt(Sampling)
    clients: Clients = _opt(Clients)
    hosts: Hosts = _opt(Hosts)
    cc_models: dict[str, dict[str, Any]] = _opt(dict, "overrides of the built-in cc models")
    expect: tuple[Expectation, ...] = ()
    pre_period_h: float = _num(0, ge=0, le=24 * 31, doc="hours before start with the same hosts and no arm")
    shared_bottleneck: SharedBottleneck = _opt(SharedBottleneck)
    chunk_stream: int = _num(0, ge=0, doc="salt of the per-chunk random streams (the pre-period run uses 1)")

    # ---- derived -------------------------------------------------------------------------
    @property
    def start_ms(self) -> int:
        return int(round(self.start.timestamp() * 1000))

    @property
    def n_hosts(self) -> int:
        return sum(a.hosts for a in self.arms)

    def arm_model(self, arm: Arm) -> CCModel:
        """The resolved cc model of an arm: built-in defaults < cc_models[cc] < arm.model."""
        base = DEFAULT_CC_MODELS[arm.cc]
        base = replace(base, **_coerce_model(self.cc_models.get(arm.cc, {})))
        return replace(base, **_coerce_model(arm.model))

    def arm_cc_version(self, arm: Arm) -> int | None:
        return arm.cc_version if arm.cc_version is not None else DEFAULT_CC_VERSION.get(arm.cc)

    def with_overrides(self, *, seed: int | None = None, hours: float | None = None,
                       start: datetime | None = None, arm_of: dict[str, str] | None = None,
                       pop: str | None = None) -> "Scenario":
        out = self
        if pop is not None:
            if not pop or "/" in pop or pop.strip() != pop:
                raise ScenarioError([f"--pop: must be a PoP name without spaces or '/', got {pop!r}"])
            out = replace(out, pop=pop)  # host names follow the PoP (hosts.name_format)
        if start is not None:
            out = replace(out, start=start)
        if arm_of:
            names = {a.name for a in out.arms}
            hosts = set(host_names_of(out))
            bad = [f"--arm-map: {h}: unknown host" for h in arm_of if h not in hosts]
            bad += [f"--arm-map: {h}: unknown arm {a!r} (arms: {', '.join(sorted(names))})"
                    for h, a in arm_of.items() if a not in names]
            if bad:
                raise ScenarioError(bad)
            out = replace(out, hosts=replace(out.hosts, arm_of=dict(arm_of)))
        if seed is not None:
            out = replace(out, seed=seed)
        if hours is not None:
            if hours <= 0:
                raise ScenarioError([f"--hours: must be > 0, got {hours}"])
            out = replace(out, duration_h=hours)
        return out


def pre_period_of(sc: Scenario, hours: float | None = None) -> Scenario:
    """The ``hours`` (default ``sc.pre_period_h``) before ``sc.start`` on the same PoP: the same hosts
    with the same host effects and clients (same seed), every host on the first arm's cc and
    kernel with no planted effect, records carrying no arm and no rollout id — what the judge's
    pre-period adjustment reads. Connections draw from their own random streams."""
    hours = sc.pre_period_h if hours is None else hours
    base = sc.arms[0]
    arms = tuple(replace(a, name="", cc=base.cc, kernel=base.kernel, cc_version=base.cc_version,
                         model=dict(base.model), effects=()) for a in sc.arms)
    # no arm, so nothing is treated: no spillover either (the shared-bottleneck mode is a planted effect)
    return replace(sc, arms=arms, rollout_id="", start=sc.start - timedelta(hours=hours), duration_h=hours,
                   expect=(), pre_period_h=0, chunk_stream=1, hosts=replace(sc.hosts, arm_of={}),
                   shared_bottleneck=SharedBottleneck())


def _coerce_model(d: dict[str, Any]) -> dict[str, Any]:
    out = dict(d)
    if "high_loss_tail_pct" in out:
        out["high_loss_tail_pct"] = tuple(out["high_loss_tail_pct"])
    return out


# --------------------------------------------------------------------------------------------
# loading: pydantic validates the dataclasses; its errors in this module's words

_SCHEMA = ConfigDict(extra="forbid")
for _cls in (Dist, RandomLoss, ClientClass, WithinPrefix, Clients, Diurnal, Traffic, Sampling, HostEffectSD,
             HostOverride, SharedBottleneck, Hosts, CCModel, Segment, Effect, Arm, Expectation, Scenario):
    _cls.__pydantic_config__ = _SCHEMA  # type: ignore[attr-defined]


@functools.cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


_EXPECTED = {"float_type": "number", "float_parsing": "number", "int_type": "integer", "int_parsing": "integer",
             "int_from_float": "integer", "string_type": "string", "bool_type": "boolean",
             "bool_parsing": "boolean", "list_type": "list", "tuple_type": "list", "dict_type": "mapping",
             "dataclass_type": "mapping", "dataclass_exact_type": "mapping"}
_BOUND = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
          "less_than": ("<", "lt")}


def _got(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


def _dataclass_at(cls: Any, loc: tuple) -> Any:
    """The dataclass that holds the field at ``loc`` (for the keys allowed next to an unknown one)."""
    for part in loc:
        if isinstance(part, int):
            continue
        if not dataclasses.is_dataclass(cls):
            return None
        cls = typing.get_type_hints(cls).get(str(part))
        for _ in range(4):  # to the dataclass inside Optional[...], tuple[...], dict[..., ...]
            if dataclasses.is_dataclass(cls):
                break
            args = [a for a in typing.get_args(cls) if a is not type(None) and a is not Ellipsis]
            cls = args[-1] if args else None
    return cls if dataclasses.is_dataclass(cls) else None


def _problems(exc: ValidationError, cls: type, prefix: str = "") -> list[str]:
    out = []
    for e in exc.errors(include_url=False):
        loc, kind, value = tuple(e["loc"]), e["type"], e.get("input")
        path = path_of(loc, prefix) or "<top>"
        if kind == "missing" and len(loc) > 1 and isinstance(loc[-1], int):  # a fixed-size tuple too short
            holder = _dataclass_at(cls, loc[:-2])
            hint = typing.get_type_hints(holder).get(str(loc[-2])) if holder else None
            n = len([a for a in typing.get_args(hint) if a is not type(None)]) if hint else loc[-1] + 1
            got = f", got {len(value)}" if isinstance(value, (list, tuple)) else ""
            out.append(f"{path_of(loc[:-1], prefix)}: expected a list of {n} values{got}")
        elif kind in ("missing", "missing_argument"):
            out.append(f"{path}: missing required key")
        elif kind in ("unexpected_keyword_argument", "extra_forbidden"):
            holder = _dataclass_at(cls, loc[:-1])
            known = [f.name for f in fields(holder)] if holder else []
            hint = difflib.get_close_matches(str(loc[-1]), known, n=1)
            out.append(f"{path}: unknown key{f' (did you mean {hint[0]!r}?)' if hint else ''}"
                       f"; allowed: {', '.join(known)}")
        elif kind in _BOUND:
            sym, key = _BOUND[kind]
            out.append(f"{path}: must be {sym} {e['ctx'][key]:g}, got {value:g}")
        elif kind in _EXPECTED:
            out.append(f"{path}: expected {_EXPECTED[kind]}, got {_got(value)}")
        elif kind == "literal_error":
            out.append(f"{path}: expected one of {e['ctx']['expected']}, got {value!r}")
        elif kind == "too_long" and isinstance(value, (list, tuple)):
            out.append(f"{path}: expected a list of {e['ctx']['max_length']} values, got {len(value)}")
        elif kind == "value_error":
            out.append(f"{path}: {e['ctx']['error']}")
        else:
            out.append(f"{path}: {e['msg']}")
    return out


def _build(cls: type, raw: Any, path: str, errors: list[str]) -> Any:
    """``raw`` validated as the dataclass ``cls`` (None, and its problems added to ``errors``, when
    it is not one)."""
    if not isinstance(raw, dict):
        errors.append(f"{path or '<top>'}: expected mapping, got {_got(raw)}")
        return None
    try:
        return _adapter(cls).validate_python(raw)
    except ValidationError as exc:
        errors.extend(_problems(exc, cls, path))
        return None


def _walk(obj: Any, path: str):
    """Yield (path, object) for every dataclass inside ``obj``."""
    if dataclasses.is_dataclass(obj):
        yield path, obj
        for f in fields(obj):
            yield from _walk(getattr(obj, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(obj, tuple):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{path}.{k}")


def _cross_checks(sc: Scenario) -> list[str]:
    out: list[str] = []
    for p, obj in _walk(sc, ""):
        if hasattr(obj, "_check"):  # Dist, ClientClass, CCModel: checks across their own fields
            out.extend(obj._check(p or "<top>"))
    if not sc.arms:
        out.append("arms: at least one arm is required")
    names = [a.name for a in sc.arms]
    for i, a in enumerate(sc.arms):
        if names.count(a.name) > 1:
            out.append(f"arms[{i}].name: duplicate arm name {a.name!r}")
        if a.cc not in KNOWN_CC:
            out.append(f"arms[{i}].cc: unknown congestion control {a.cc!r}; known: {', '.join(KNOWN_CC)}")
        out.extend(_check_model_dict(a.model, f"arms[{i}].model"))
        for j, e in enumerate(a.effects):
            out.extend(_check_segment(sc, e.where, f"arms[{i}].effects[{j}].where"))
            if e.until_hour is not None and e.until_hour <= e.from_hour:
                out.append(f"arms[{i}].effects[{j}].until_hour: must be > from_hour ({e.from_hour:g})")
    for cc, d in sc.cc_models.items():
        if cc not in KNOWN_CC:
            out.append(f"cc_models.{cc}: unknown congestion control; known: {', '.join(KNOWN_CC)}")
        out.extend(_check_model_dict(d, f"cc_models.{cc}"))
    classes = [c.name for c in sc.clients.classes]
    if not classes:
        out.append("clients.classes: at least one class is required")
    elif sum(c.share for c in sc.clients.classes) <= 0:
        out.append("clients.classes: shares must not all be 0")
    for i, c in enumerate(sc.clients.classes):
        if classes.count(c.name) > 1:
            out.append(f"clients.classes[{i}].name: duplicate class {c.name!r}")
    w = sc.traffic.diurnal.hourly_weights
    if w is not None and (len(w) != 24 or min(w) < 0 or sum(w) <= 0):
        out.append("traffic.diurnal.hourly_weights: need 24 non-negative numbers, not all 0")
    try:
        host_names = set(host_names_of(sc))
    except (KeyError, ValueError, IndexError) as exc:
        out.append(f"hosts.name_format: cannot format {sc.hosts.name_format!r}: {exc}")
        host_names = set()
    for i, o in enumerate(sc.hosts.overrides):
        p = f"hosts.overrides[{i}]"
        if host_names and o.host not in host_names:
            out.append(f"{p}.host: no host named {o.host!r} (hosts are {min(host_names)} .. {max(host_names)})")
        for k, v in o.class_weight.items():
            if k not in classes:
                out.append(f"{p}.class_weight.{k}: unknown client class; known: {', '.join(classes)}")
            elif v < 0:
                out.append(f"{p}.class_weight.{k}: must be >= 0, got {v:g}")
        for k in o.effect:
            if k not in typing.get_args(MetricName):
                out.append(f"{p}.effect.{k}: unknown metric; known: {', '.join(typing.get_args(MetricName))}")
    for i, e in enumerate(sc.expect):
        p = f"expect[{i}]"
        if e.arm not in names:
            out.append(f"{p}.arm: no arm named {e.arm!r}; arms: {', '.join(names)}")
        if e.vs is not None and e.vs not in names:
            out.append(f"{p}.vs: no arm named {e.vs!r}; arms: {', '.join(names)}")
        if e.range[1] < e.range[0]:
            out.append(f"{p}.range: need low <= high, got {list(e.range)}")
        out.extend(_check_segment(sc, e.where, f"{p}.where"))
    return out


def _check_model_dict(d: dict[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    model = _build(CCModel, d, path, errors)
    if model is not None:
        errors.extend(model._check(path))
    return errors


def _check_segment(sc: Scenario, seg: Segment, path: str) -> list[str]:
    classes = [c.name for c in sc.clients.classes]
    out = [f"{path}.classes: unknown client class {c!r}; known: {', '.join(classes)}"
           for c in seg.classes if c not in classes]
    for key in ("buffer_bdp", "bandwidth_mbps", "rtt_ms"):
        rng = getattr(seg, key)
        if rng is not None and rng[1] <= rng[0]:
            out.append(f"{path}.{key}: need low < high, got {list(rng)}")
    return out


def host_names_of(sc: Scenario) -> list[str]:
    """Host names in index order (edge-tyo1-01, ...)."""
    return [sc.hosts.name_format.format(pop=sc.pop, index=i + 1) for i in range(sc.n_hosts)]


# --------------------------------------------------------------------------------------------
# entry points


def scenario_from_dict(raw: Any, source: str = "scenario") -> Scenario:
    """Validate a parsed YAML mapping; raise :class:`ScenarioError` listing every problem."""
    errors: list[str] = []
    sc = _build(Scenario, raw, "", errors)
    if sc is None or errors:
        raise ScenarioError(errors or ["<top>: invalid"], source)
    errors = _cross_checks(sc)
    if errors:
        raise ScenarioError(errors, source)
    return sc


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def scenarios_dir() -> Path:
    return repo_root() / "scenarios"


def resolve_scenario_path(name_or_path: str) -> Path:
    """A path to a YAML file, or the NAME of a shipped scenario (``scenarios/NAME.yaml``)."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise ScenarioError([f"file not found: {p}"], str(p))
        return p
    shipped = scenarios_dir() / f"{name_or_path}.yaml"
    if shipped.exists():
        return shipped
    known = sorted(q.stem for q in scenarios_dir().glob("*.yaml"))
    raise ScenarioError([f"no scenario file {name_or_path!r} and no shipped scenario of that name; "
                         f"shipped: {', '.join(known) or '(none)'}"], name_or_path)


def load_scenario(name_or_path: str) -> Scenario:
    path = resolve_scenario_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError([f"not valid YAML: {exc}"], str(path)) from None
    return scenario_from_dict(raw, str(path))


def to_plain(obj: Any) -> Any:
    """Dataclasses -> JSON-able dicts (for truth.json)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, datetime):
        return obj.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return obj
