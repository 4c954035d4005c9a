"""Experiment YAML → a list of cases (pure: no I/O beyond reading the file).

An experiment has a default ``bottleneck``, optional ``sweep`` (cartesian product; each
combination instantiates every case template, ``{var}`` placeholders substituted) and ``cases``,
each a list of ``flows``. ``quick`` overrides (scale, sweep values, case names) give the short
version ``make lab`` runs. See lab/README.md for the reference.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

BOTTLENECK_KEYS = ("rate_mbit", "buffer_bdp", "rtt_ms", "loss_pct", "burst_bytes", "path", "trace", "loss_model",
                   "ge_p", "ge_r", "ge_loss_bad", "ge_loss_good")
DEFAULT_BOTTLENECK = {"rate_mbit": 20.0, "buffer_bdp": 1.0, "rtt_ms": 20.0, "loss_pct": 0.0, "burst_bytes": 16384}
PATHS = ("link", "tbf")  # link: ccab-link (delay, rate or trace, droptail, loss); tbf: tbf + nftables, no delay
LOSS_MODELS = ("random", "gilbert-elliott")
SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*$")


class SpecError(ValueError):
    """The experiment file is invalid; the message names the field."""


def parse_size(v: Any) -> int:
    """``10K`` → 10240, ``1M`` → 1048576, ``1500`` → 1500."""
    if isinstance(v, int):
        return v
    m = SIZE_RE.match(str(v))
    if not m:
        raise SpecError(f"size {v!r}: expected a number with an optional K/M/G suffix")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


@dataclass
class Flow:
    """One traffic source. ``stream``: one long download for ``duration_s``; ``requests``:
    Poisson arrivals of ``size``-byte downloads, one new connection each, at ``rate_per_s``
    (a list = rising load: the duration is split into equal phases)."""

    id: str
    cc: str
    host: str
    kind: Literal["stream", "requests"] = "stream"
    start_s: float = 0.0
    duration_s: float = 30.0
    size_bytes: int = 0
    rate_per_s: list[float] = field(default_factory=list)

    @property
    def size_class(self) -> str:
        if self.kind == "stream":
            return "stream"
        return _size_label(self.size_bytes)


def _size_label(n: int) -> str:
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return f"{n}B"


@dataclass
class Case:
    name: str
    bottleneck: dict[str, float]
    flows: list[Flow]
    vars: dict[str, Any] = field(default_factory=dict)

    @property
    def hosts(self) -> dict[str, str]:
        """host label → cc (validated: one cc per host)."""
        return {f.host: f.cc for f in self.flows}

    @property
    def duration_s(self) -> float:
        return max(f.start_s + f.duration_s for f in self.flows)

    @property
    def algorithms(self) -> list[str]:
        return sorted({f.cc for f in self.flows})


@dataclass
class Experiment:
    name: str
    kind: str
    description: str
    cases: list[Case]
    sample_interval_ms: int
    collapse_share: float
    collapse_min_s: float
    seed: int
    source: dict  # the YAML as loaded, recorded in run.json
    base_dir: str = "."  # a relative ``trace`` file is found here (the YAML's directory)

    @property
    def algorithms(self) -> list[str]:
        return sorted({a for c in self.cases for a in c.algorithms})


def _subst(obj: Any, env: dict[str, Any]) -> Any:
    if isinstance(obj, str):
        m = re.fullmatch(r"\{(\w+)\}", obj)
        if m and m.group(1) in env:
            return env[m.group(1)]  # keep the type of a lone placeholder (e.g. a number)
        return re.sub(r"\{(\w+)\}", lambda mm: str(env.get(mm.group(1), mm.group(0))), obj)
    if isinstance(obj, list):
        return [_subst(x, env) for x in obj]
    if isinstance(obj, dict):
        return {k: _subst(v, env) for k, v in obj.items()}
    return obj


def load(path: str | Path, quick: bool = False, scale: float | None = None,
         only_algorithms: list[str] | None = None, rtt_ms: float | None = None,
         path_kind: str | None = None) -> Experiment:
    """Read and expand an experiment file. ``quick`` applies its ``quick:`` block; ``scale``
    multiplies every start and duration (after ``quick``'s own scale); ``rtt_ms`` / ``path_kind``
    override every case's base RTT / path."""
    src = yaml.safe_load(Path(path).read_text())
    if not isinstance(src, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    exp = expand(src, quick=quick, scale=scale, only_algorithms=only_algorithms, origin=str(path), rtt_ms=rtt_ms,
                 path_kind=path_kind)
    exp.base_dir = str(Path(path).resolve().parent)
    return exp


def expand(src: dict, quick: bool = False, scale: float | None = None,
           only_algorithms: list[str] | None = None, origin: str = "<yaml>", rtt_ms: float | None = None,
           path_kind: str | None = None) -> Experiment:
    src = copy.deepcopy(src)
    for key in ("name", "cases"):
        if key not in src:
            raise SpecError(f"{origin}: missing required key {key!r}")
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", str(src["name"])):
        raise SpecError(f"{origin}: name {src['name']!r}: lower-case letters, digits and '-' only")
    sweep = dict(src.get("sweep") or {})
    factor = 1.0
    case_filter = None
    if quick and src.get("quick"):
        q = src["quick"]
        factor *= float(q.get("scale", 1.0))
        sweep.update(q.get("sweep") or {})
        case_filter = q.get("cases")
    if scale:
        factor *= scale
    base_bn = {**DEFAULT_BOTTLENECK, **(src.get("bottleneck") or {})}
    _check_bottleneck(base_bn, origin)

    combos = [dict(zip(sweep, vals)) for vals in itertools.product(*sweep.values())] if sweep else [{}]
    cases: list[Case] = []
    for env in combos:
        for ci, tmpl in enumerate(src["cases"]):
            t = _subst(tmpl, env)
            name = str(t.get("name") or f"case{ci + 1}")
            if case_filter and tmpl.get("name") not in case_filter and name not in case_filter:
                continue
            bn = {**base_bn, **(t.get("bottleneck") or {}), **{k: v for k, v in env.items() if k in BOTTLENECK_KEYS}}
            if rtt_ms is not None:
                bn["rtt_ms"] = float(rtt_ms)
            if path_kind is not None:
                bn["path"] = path_kind
            _check_bottleneck(bn, f"{origin} case {name}")
            _fill_path(bn)
            flows = []
            for fi, fsrc in enumerate(t.get("flows") or []):
                flows.append(_flow(fsrc, fi, factor, f"{origin} case {name} flow {fi + 1}"))
            if not flows:
                raise SpecError(f"{origin} case {name}: no flows")
            hosts: dict[str, str] = {}
            for f in flows:
                if hosts.setdefault(f.host, f.cc) != f.cc:
                    raise SpecError(f"{origin} case {name}: host {f.host!r} has flows with {hosts[f.host]} "
                                    f"and {f.cc} (one congestion control per host)")
            if only_algorithms and not set(hosts.values()) <= set(only_algorithms):
                continue
            cases.append(Case(name=name, bottleneck=bn, flows=flows, vars=env))
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"{origin}: case names repeat after the sweep: {dupes} (put the sweep vars in the name)")
    collapse = src.get("collapse") or {}
    return Experiment(
        name=src["name"], kind=str(src.get("kind", src["name"])), description=str(src.get("description", "")).strip(),
        cases=cases, sample_interval_ms=int(src.get("sample_interval_ms", 1000)),
        collapse_share=float(collapse.get("share_of_fair", 0.10)), collapse_min_s=float(collapse.get("min_s", 3)),
        seed=int(src.get("seed", 1)), source=src,
    )


def _check_bottleneck(bn: dict, where: str) -> None:
    unknown = set(bn) - set(BOTTLENECK_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown bottleneck keys {sorted(unknown)} (known: {', '.join(BOTTLENECK_KEYS)})")
    if not 0.1 <= float(bn["rate_mbit"]) <= 1000:
        raise SpecError(f"{where}: rate_mbit {bn['rate_mbit']} outside 0.1..1000")
    if float(bn["buffer_bdp"]) <= 0:
        raise SpecError(f"{where}: buffer_bdp must be > 0")
    if not 0 <= float(bn["loss_pct"]) < 100:
        raise SpecError(f"{where}: loss_pct must be in [0, 100)")
    if float(bn["rtt_ms"]) < 0:
        raise SpecError(f"{where}: rtt_ms must be >= 0")
    path = bn.get("path")
    if path is not None and path not in PATHS:
        raise SpecError(f"{where}: path {path!r}: link (ccab-link) or tbf (tbf + nftables, no delay)")
    link = path == "link" or (path is None and float(bn["rtt_ms"]) > 0)
    model = bn.get("loss_model", "random")
    if model not in LOSS_MODELS:
        raise SpecError(f"{where}: loss_model {model!r}: random or gilbert-elliott")
    for k in ("trace", "ge_p", "ge_r"):
        if bn.get(k) is not None and not link:
            raise SpecError(f"{where}: {k} needs path: link (tbf has no traces or bursty loss)")
    if model == "gilbert-elliott":
        if not link:
            raise SpecError(f"{where}: loss_model gilbert-elliott needs path: link")
        for k in ("ge_p", "ge_r"):
            if bn.get(k) is None or not 0 < float(bn[k]) <= 1:
                raise SpecError(f"{where}: loss_model gilbert-elliott needs {k} in (0, 1] "
                                "(good→bad and bad→good probability per packet)")
        for k in ("ge_loss_bad", "ge_loss_good"):
            if bn.get(k) is not None and not 0 <= float(bn[k]) <= 1:
                raise SpecError(f"{where}: {k} must be a probability in [0, 1]")
    trace = bn.get("trace")
    if trace is not None and not isinstance(trace, (str, dict)):
        raise SpecError(f"{where}: trace: a Mahimahi trace file, or a mapping of `ccab-link gen-trace` options "
                        "(seed, duration_s, rates_mbps, ...)")


def _fill_path(bn: dict) -> None:
    """The default path: ccab-link when there is a base RTT to emulate, tbf for rtt_ms 0."""
    if bn.get("path") is None:
        bn["path"] = "link" if float(bn["rtt_ms"]) > 0 else "tbf"
    bn.setdefault("loss_model", "random")


def _flow(f: dict, index: int, factor: float, where: str) -> Flow:
    if not isinstance(f, dict) or "cc" not in f:
        raise SpecError(f"{where}: a flow needs at least cc")
    kind = f.get("kind", "stream")
    if kind not in ("stream", "requests"):
        raise SpecError(f"{where}: kind {kind!r}: stream or requests")
    rates = f.get("rate_per_s", [])
    rates = [float(r) for r in (rates if isinstance(rates, list) else [rates])]
    size = parse_size(f["size"]) if "size" in f else 0
    if kind == "requests" and (not rates or size <= 0):
        raise SpecError(f"{where}: requests need size and rate_per_s")
    return Flow(
        id=str(f.get("id", f"f{index + 1}")), cc=str(f["cc"]), host=str(f.get("host", f"h{index + 1}")),
        kind=kind, start_s=float(f.get("start_s", 0)) * factor, duration_s=float(f.get("duration_s", 30)) * factor,
        size_bytes=size, rate_per_s=rates,
    )
