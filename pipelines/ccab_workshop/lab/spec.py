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
from typing import Annotated, Any, Literal, TypeVar

import yaml
from ccab.base.yamlschema import Strict, ValidationError, field_error, number, one_of, problems
from pydantic import AfterValidator, BeforeValidator, Field, model_validator

BOTTLENECK_KEYS = ("rate_mbit", "buffer_bdp", "rtt_ms", "loss_pct", "burst_bytes", "path", "trace", "loss_model",
                   "ge_p", "ge_r", "ge_loss_bad", "ge_loss_good")
DEFAULT_BOTTLENECK = {"rate_mbit": 20.0, "buffer_bdp": 1.0, "rtt_ms": 20.0, "loss_pct": 0.0, "burst_bytes": 16384}
PATHS = ("link", "tbf")  # link: ccab-link (delay, rate or trace, droptail, loss); tbf: tbf + nftables, no delay
LOSS_MODELS = ("random", "gilbert-elliott")
SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*$")


class SpecError(ValueError):
    """The experiment file is invalid; ``problems`` lists every reason, each naming its field."""

    def __init__(self, problems: list[str] | str, origin: str = "<yaml>"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.origin = origin
        if len(self.problems) == 1:
            super().__init__(f"{origin}: {self.problems[0]}")
        else:
            super().__init__(f"{origin}: {len(self.problems)} problem(s):\n" + "\n".join(f"  {x}" for x in self.problems))


def parse_size(v: Any) -> int:
    """``10K`` → 10240, ``1M`` → 1048576, ``1500`` → 1500."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    m = SIZE_RE.match(str(v)) if isinstance(v, str) and not isinstance(v, bool) else None
    if not m:
        raise ValueError(f"size {v!r}: expected a number with an optional K/M/G suffix")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


# ----------------------------------------------------------------------------- the file's schema
# pydantic models (ccab.base.yamlschema): every field's type, bounds and choices; a case is checked
# after the sweep's values are substituted into it.


class _BottleneckIn(Strict):
    rate_mbit: number(float, 0.1, 1000) = DEFAULT_BOTTLENECK["rate_mbit"]
    buffer_bdp: number(float, 0, lo_open=True) = DEFAULT_BOTTLENECK["buffer_bdp"]
    rtt_ms: number(float, 0) = DEFAULT_BOTTLENECK["rtt_ms"]
    loss_pct: number(float, 0, 100, hi_open=True) = DEFAULT_BOTTLENECK["loss_pct"]
    burst_bytes: Annotated[int, BeforeValidator(parse_size)] = DEFAULT_BOTTLENECK["burst_bytes"]
    path: one_of(PATHS) | None = None  # link: ccab-link; tbf: tbf + nftables, no delay
    trace: str | dict[str, Any] | None = None  # a Mahimahi file, or `ccab-link gen-trace` options
    loss_model: one_of(LOSS_MODELS) = "random"
    ge_p: number(float, 0, 1, lo_open=True) | None = None
    ge_r: number(float, 0, 1, lo_open=True) | None = None
    ge_loss_bad: number(float, 0, 1) | None = None
    ge_loss_good: number(float, 0, 1) | None = None

    @model_validator(mode="after")
    def _link_only(self):
        link = self.path == "link" or (self.path is None and self.rtt_ms > 0)
        for k in ("trace", "ge_p", "ge_r"):
            if getattr(self, k) is not None and not link:
                raise field_error(k, f"{k} needs path: link (tbf has no traces or bursty loss)")
        if self.loss_model == "gilbert-elliott":
            if not link:
                raise field_error("loss_model", "loss_model gilbert-elliott needs path: link")
            for k in ("ge_p", "ge_r"):
                if getattr(self, k) is None:
                    raise field_error(k, f"loss_model gilbert-elliott needs {k} in (0, 1] "
                                         "(good→bad and bad→good probability per packet)")
        return self


class _FlowIn(Strict):
    cc: str
    id: str | None = None
    host: str | None = None
    kind: one_of(("stream", "requests")) = "stream"
    start_s: number(float, 0) = 0.0
    duration_s: number(float, 0, lo_open=True) = 30.0
    size: Annotated[int, BeforeValidator(parse_size)] = 0
    rate_per_s: number(float, 0) | list[number(float, 0)] = []

    @model_validator(mode="after")
    def _requests_need_a_size_and_a_rate(self):
        if self.kind == "requests" and (not self.rate_per_s or self.size <= 0):
            raise field_error("", "requests need size and rate_per_s")
        return self


class _CaseIn(Strict):
    name: str | None = None
    bottleneck: dict[str, Any] = {}  # merged with the file's and the sweep's, then read as _BottleneckIn
    flows: Annotated[list[_FlowIn], Field(min_length=1)]


class _QuickIn(Strict):
    scale: number(float, 0, lo_open=True) = 1.0
    sweep: dict[str, list[Any]] = {}
    cases: list[str] | None = None


class _CollapseIn(Strict):
    share_of_fair: number(float, 0, 1) = 0.10
    min_s: number(float, 0) = 3.0


def _experiment_name(v: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", v):
        raise ValueError(f"{v!r}: lower-case letters, digits and '-' only (at most 41)")
    return v


class _ExperimentIn(Strict):
    name: Annotated[str, AfterValidator(_experiment_name)]
    kind: str | None = None
    description: str = ""
    seed: number(int, 0) = 1
    sample_interval_ms: number(int, 1) = 1000
    collapse: _CollapseIn = _CollapseIn()
    bottleneck: dict[str, Any] = {}
    sweep: dict[str, list[Any]] = {}
    quick: _QuickIn | None = None
    cases: Annotated[list[dict[str, Any]], Field(min_length=1)]  # templates: read as _CaseIn per sweep value


_M = TypeVar("_M", bound=Strict)


def _read(model: type[_M], raw: Any, path: str) -> _M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _Problems(problems(exc, model, path)) from None


class _Problems(Exception):
    def __init__(self, problems: list[str]):
        self.problems = problems


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
    try:
        src = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML: {exc}", str(path)) from None
    if not isinstance(src, dict):
        raise SpecError("expected a mapping at the top level", str(path))
    exp = expand(src, quick=quick, scale=scale, only_algorithms=only_algorithms, origin=str(path), rtt_ms=rtt_ms,
                 path_kind=path_kind)
    exp.base_dir = str(Path(path).resolve().parent)
    return exp


def expand(src: dict, quick: bool = False, scale: float | None = None,
           only_algorithms: list[str] | None = None, origin: str = "<yaml>", rtt_ms: float | None = None,
           path_kind: str | None = None) -> Experiment:
    """The experiment's cases, every sweep combination of every case template, each validated;
    raises :class:`SpecError` naming each problem's field (``cases[1] (bbr-2).flows[0].kind: ...``)."""
    try:
        return _expand(copy.deepcopy(src), quick, scale, only_algorithms, rtt_ms, path_kind)
    except _Problems as exc:
        raise SpecError(exc.problems, origin) from None


def _expand(src: dict, quick: bool, scale: float | None, only_algorithms: list[str] | None,
            rtt_ms: float | None, path_kind: str | None) -> Experiment:
    top = _read(_ExperimentIn, src, "")
    sweep = dict(top.sweep)
    factor = 1.0
    case_filter = None
    if quick and top.quick:
        factor *= top.quick.scale
        sweep.update(top.quick.sweep)
        case_filter = top.quick.cases
    if scale:
        factor *= scale
    _read(_BottleneckIn, top.bottleneck, "bottleneck")

    combos = [dict(zip(sweep, vals)) for vals in itertools.product(*sweep.values())] if sweep else [{}]
    cases: list[Case] = []
    errors: list[str] = []
    for env in combos:
        for ci, tmpl in enumerate(top.cases):
            t = _subst(tmpl, env)
            label = f"cases[{ci}]" + (f" ({t.get('name')})" if env and t.get("name") else "")
            try:
                c = _read(_CaseIn, t, label)
                name = c.name or f"case{ci + 1}"
                if case_filter and tmpl.get("name") not in case_filter and name not in case_filter:
                    continue
                bn = {**top.bottleneck, **c.bottleneck, **{k: v for k, v in env.items() if k in BOTTLENECK_KEYS}}
                if rtt_ms is not None:
                    bn["rtt_ms"] = float(rtt_ms)
                if path_kind is not None:
                    bn["path"] = path_kind
                b = _read(_BottleneckIn, bn, f"{label}.bottleneck")
            except _Problems as exc:
                errors.extend(x for x in exc.problems if x not in errors)
                continue
            bottleneck = b.model_dump(exclude_none=True)
            bottleneck["path"] = b.path or ("link" if b.rtt_ms > 0 else "tbf")
            flows = [Flow(id=f.id or f"f{fi + 1}", cc=f.cc, host=f.host or f"h{fi + 1}", kind=f.kind,
                          start_s=f.start_s * factor, duration_s=f.duration_s * factor, size_bytes=f.size,
                          rate_per_s=list(f.rate_per_s) if isinstance(f.rate_per_s, list) else [f.rate_per_s])
                     for fi, f in enumerate(c.flows)]
            hosts: dict[str, str] = {}
            for f in flows:
                if hosts.setdefault(f.host, f.cc) != f.cc:
                    errors.append(f"{label}.flows: host {f.host!r} has flows with {hosts[f.host]} and {f.cc} "
                                  "(one congestion control per host)")
                    break
            if only_algorithms and not set(hosts.values()) <= set(only_algorithms):
                continue
            cases.append(Case(name=name, bottleneck=bottleneck, flows=flows, vars=env))
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        errors.append(f"cases: case names repeat after the sweep: {dupes} (put the sweep vars in the name)")
    if errors:
        raise _Problems(errors)
    return Experiment(
        name=top.name, kind=top.kind or top.name, description=top.description.strip(), cases=cases,
        sample_interval_ms=top.sample_interval_ms, collapse_share=top.collapse.share_of_fair,
        collapse_min_s=top.collapse.min_s, seed=top.seed, source=src,
    )
