"""A rollout plan: YAML -> typed, validated dataclasses.

The file is read by pydantic models (``_PlanIn`` and one per section, built on
``ccab.base.yamlschema.Strict``); what needs several fields (PoPs, arm names, the inventory,
stage sizes) is checked after them. Every problem of a file is reported at once, each naming the
field path (``stages[1].fraction: must be in (0, 1], got 1.5``). The plan is refused at plan time for
anything the controller could only discover by flipping a host: unknown congestion-control
names, arms that do not exist, stages whose treatment would leave a PoP without control hosts.

The format is documented in ``pipelines/ccab/rollout/README.md``; ``rollout/plans/`` has examples.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from ccab.base.contracts import rollout_id_problem
from ccab.base.yamlschema import Strict, ValidationError, field_error, number, one_of, problems
from ccab.base.vocabulary import JUDGED_METRICS, SEVERITIES, statistics_of
from ccab.judge.model import BREAKER_METRICS, Breaker, Guardrail
from pydantic import AfterValidator, ValidationInfo, field_validator, model_validator

# Kernel congestion-control modules the controller may assign. An agent still checks what its
# kernel offers (tcp_available_congestion_control) and refuses what it does not have; this list
# only catches typos ("bbrv2", "cubc") before anything is published.
KNOWN_CC = ("cubic", "reno", "bbr", "bbr2", "bbr3", "dctcp", "htcp", "vegas", "westwood", "hybla",
            "illinois", "highspeed", "scalable", "veno", "yeah", "lp", "nv", "cdg", "bic")
KNOWN_QDISC = ("fq", "fq_codel", "pfifo_fast", "cake", "tbf", "htb", "pfifo")
# what the controller does with a judge decision for one (pop, treatment arm)
ACTIONS = ("rollback_arm", "rollback_all", "halt_arm", "hold", "continue")


class PlanError(ValueError):
    """The plan is invalid; ``problems`` lists every reason, each starting with a field path."""

    def __init__(self, problems: list[str], source: str = "plan"):
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: {len(problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class Arm:
    name: str
    cc: str
    bbr_version: int | None = None
    qdisc: str | None = None


@dataclass(frozen=True)
class Inventory:
    hosts: dict[str, tuple[str, ...]]  # pop -> hosts (plan order: the pairing covariate order)
    file: str | None = None
    from_heartbeats: bool = False  # also enrol hosts seen in agent heartbeats of these PoPs


@dataclass(frozen=True)
class Switchback:
    period_minutes: int
    periods: int
    arms: tuple[str, ...]


@dataclass(frozen=True)
class Design:
    seed: int
    pairing: bool = False  # blocks of consecutive inventory hosts, one per arm
    switchback: Switchback | None = None


@dataclass(frozen=True)
class Stage:
    name: str
    fraction: float | None = None  # share of each PoP's hosts per treatment arm
    hosts: int | None = None  # or an absolute number of hosts per treatment arm per PoP
    min_duration_minutes: int = 60
    looks: int = 1
    min_applied: float = 1.0  # share of changed hosts that must report `applied` before a look
    #: or a fraction per PoP drawn from these values (interference: the treated share varies across PoPs)
    fractions: tuple[float, ...] | None = None
    #: client segments the treatment targets (``access:mobile``, ``asn:…``, ``country:…``; several =
    #: their union): on a treated host only connections from the segment's prefixes run the
    #: treatment (assignment/2, a BPF socket policy); None: every connection of a treated host
    segment: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Limits:
    max_hosts_per_pop_per_step: int | None = None
    max_fraction_per_pop_per_step: float | None = None
    min_control_hosts: int = 2


@dataclass(frozen=True)
class Policy:
    """Judge decision -> controller action, per (pop, treatment arm)."""

    rollback: str = "rollback_arm"
    halt: str = "halt_arm"
    no_decision: str = "hold"
    inconclusive_by_design: str = "hold"
    promote_on_pass: bool = True  # after the last stage: the passing arm(s) stay; report "promoted"


@dataclass(frozen=True)
class Plan:
    rollout_id: str
    pops: tuple[str, ...]
    inventory: Inventory
    arms: tuple[Arm, ...]
    control_arm: str
    design: Design
    stages: tuple[Stage, ...]
    limits: Limits
    guardrails: tuple[Guardrail, ...]  # the judge's own types: a plan holds only what it can run
    breakers: tuple[Breaker, ...]
    policy: Policy
    description: str = ""
    source: str = ""
    digest: str = ""  # sha256 of the canonical plan (what the audit log records)
    #: the judge's pre-period: this many hours before the rollout's first assignment (>= 24)
    pre_period_hours: int = 168

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def segment(self) -> tuple[str, ...] | None:
        """The client segment the treatment targets (the same in every stage), or None."""
        return self.stages[0].segment if self.stages else None

    @property
    def treatment_arms(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arms if a.name != self.control_arm)

    def hosts_of(self, pop: str) -> tuple[str, ...]:
        return self.inventory.hosts.get(pop, ())

    def per_arm(self, stage: Stage, pop: str) -> int:
        """Hosts per treatment arm in ``pop`` at ``stage``."""
        n = len(self.hosts_of(pop))
        if stage.hosts is not None:
            return stage.hosts
        return int(round(self.fraction_of(stage, pop) * n))

    def fraction_of(self, stage: Stage, pop: str) -> float:
        """The stage's fraction of ``pop``'s hosts per treatment arm. With ``stage.fractions`` the
        PoPs, in an order shuffled by ``design.seed`` (the same for every stage), take the sorted
        values in turn: each value goes to as many PoPs as the others (±1), which PoP gets which is
        random (so a PoP's treated share is independent of its traffic), and a PoP keeps its rank
        in every stage (stages still grow)."""
        if stage.fractions:
            values = sorted(stage.fractions)
            return values[share_rank(self.design.seed, self.pops).get(pop, 0) % len(values)]
        return stage.fraction or 0.0


def share_rank(seed: int, pops: tuple[str, ...] | list[str]) -> dict[str, int]:
    """PoP -> its rank in the seeded order that spreads ``stages[i].fractions`` over PoPs."""
    order = sorted(pops)
    random.Random(f"ccab-rollout/shares/{seed}").shuffle(order)  # str seeds hash with SHA-512: stable
    return {pop: i for i, pop in enumerate(order)}


# ------------------------------------------------------------------------------------- loading


def _rollout_id(v: str) -> str:
    if problem := rollout_id_problem(v):
        raise ValueError(problem)
    return v


class _ArmIn(Strict):
    name: str
    cc: one_of(KNOWN_CC, "congestion control")
    bbr_version: number(int, 1, 3) | None = None
    qdisc: one_of(KNOWN_QDISC, "qdisc") | None = None

    @model_validator(mode="after")
    def _bbr_version_only_for_bbr(self):
        if self.bbr_version is not None and not self.cc.startswith("bbr"):
            raise field_error("bbr_version", f"only for a bbr cc, not {self.cc!r}")
        return self


class _SwitchbackIn(Strict):
    period_minutes: number(int, 1)
    periods: number(int, 2)
    arms: list[str]


class _DesignIn(Strict):
    seed: number(int, 0)
    pairing: bool = False
    switchback: _SwitchbackIn | None = None
    stratify_by: str = "pop"

    @field_validator("stratify_by")
    @classmethod
    def _only_pop(cls, v: str) -> str:
        if v != "pop":
            raise ValueError(f"only 'pop' is supported, got {v!r}")
        return v


class _StageIn(Strict):
    name: str | None = None
    fraction: number(float, 0, 1, lo_open=True) | None = None
    fractions: list[number(float, 0, 1, lo_open=True)] | None = None
    hosts: number(int, 1) | None = None
    min_duration_minutes: number(int, 0) = 60
    looks: number(int, 1, 100) = 1
    min_applied: number(float, 0, 1, lo_open=True) = 1.0
    segment: Any = None  # one segment or a list: checked by _segment (its own messages)

    @model_validator(mode="before")
    @classmethod
    def _one_size(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [k for k in ("fraction", "fractions", "hosts") if data.get(k) is not None]
            if len(given) > 1:
                raise field_error("", f"give one of fraction, fractions or hosts, not {' and '.join(given)}")
        return data

    @field_validator("fractions")
    @classmethod
    def _spread(cls, v: list[float] | None, info: ValidationInfo) -> list[float] | None:
        n_pops = (info.context or {}).get("n_pops", 0)
        if v is None:
            return v
        if len(set(v)) < 2:
            raise ValueError(f"give at least two different fractions (one fraction for every PoP is "
                             f"fraction), got {v!r:.60}")
        if len(v) > n_pops > 0:
            raise ValueError(f"{len(v)} fractions but {n_pops} PoP(s): each PoP gets one, so some would go "
                             f"unused; give at most {n_pops} (the 'effect vs treated share' panel needs at least "
                             f"3 PoPs)")
        return v


class _LimitsIn(Strict):
    max_hosts_per_pop_per_step: number(int, 1) | None = None
    max_fraction_per_pop_per_step: number(float, 0, 1, lo_open=True) | None = None
    min_control_hosts: number(int, 0) = 2


class _GuardrailIn(Strict):
    metric: one_of(lambda: JUDGED_METRICS)
    statistic: str
    margin: number(float, 0, lo_open=True)
    severity: one_of(lambda: SEVERITIES) = "page"
    segment: str = "all"

    @model_validator(mode="after")
    def _computable(self):
        if self.statistic not in statistics_of(self.metric):
            raise field_error("statistic", f"the judge cannot compute {self.statistic!r} for {self.metric}; "
                                           f"one of: {', '.join(statistics_of(self.metric))}")
        return self


class _BreakerIn(Strict):
    metric: one_of(lambda: BREAKER_METRICS) = "retrans_pct"
    ratio: number(float, 1, lo_open=True) = 3.0
    minutes: number(int, 1) = 10


class _PolicyIn(Strict):
    rollback: one_of(ACTIONS) = "rollback_arm"
    halt: one_of(ACTIONS) = "halt_arm"
    no_decision: one_of(ACTIONS) = "hold"
    inconclusive_by_design: one_of(ACTIONS) = "hold"
    promote_on_pass: bool = True


class _InventoryIn(Strict):
    hosts: dict[str, list[Any]] | None = None  # hosts: checked by _inventory against pops
    file: str | None = None
    from_heartbeats: bool = False


class _PlanIn(Strict):
    """The top level: scalar fields here; each section is read on its own (_read), so a problem in
    one section does not hide the problems of the others."""

    rollout_id: Annotated[str, AfterValidator(_rollout_id)]
    description: str = ""
    pops: list[Any]
    inventory: dict[str, Any] = {}
    arms: list[Any]
    control_arm: str
    design: dict[str, Any]
    stages: list[Any]
    limits: dict[str, Any] = {}
    guardrails: list[Any] = []
    breakers: list[Any] = []
    policy: dict[str, Any] = {}
    pre_period_hours: number(int, 24) = 168


_M = TypeVar("_M", bound=Strict)


def _read(model: type[_M], raw: Any, path: str, errors: list[str], **context: Any) -> _M | None:
    """``raw`` as ``model`` (None and its problems added to ``errors`` when it is not one)."""
    try:
        return model.model_validate({} if raw is None else raw, context=context)
    except ValidationError as exc:
        errors.extend(problems(exc, model, path))
        return None


def _items(model: type[_M], raw: Any, path: str, errors: list[str], **context: Any) -> list[tuple[int, _M]]:
    """Each item of the list ``raw`` read as ``model`` (the top level reports a non-list)."""
    if not isinstance(raw, list):
        return []
    return [(i, x) for i, item in enumerate(raw)
            if (x := _read(model, item, f"{path}[{i}]", errors, **context)) is not None]


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file (raises :class:`PlanError`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanError([f"cannot read: {exc.strerror or exc}"], str(path)) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PlanError([f"not valid YAML: {where}{getattr(exc, 'problem', None) or exc}"], str(path)) from None
    return plan_from_dict(raw, source=str(path), base_dir=path.parent)


def plan_from_dict(raw: Any, source: str = "plan", base_dir: Path | None = None) -> Plan:
    """Validate a parsed plan: the shape and every field's type, bounds and choices by the pydantic
    models above, then what needs more than one field (PoPs, arm names, inventory, stage sizes)."""
    errors: list[str] = []
    if not isinstance(raw, dict):
        raise PlanError([f"(top level): must be a mapping, got {type(raw).__name__}"], source)
    raw = {k: v for k, v in raw.items() if v is not None}
    top = _read(_PlanIn, raw, "", errors)
    if "design" not in raw:
        errors[:] = [e for e in errors if e != "design: required"]
        errors.append("design: required (at least design.seed, recorded for reproducibility)")

    pops: list[str] = []
    pops_raw = raw.get("pops") if isinstance(raw.get("pops"), list) else []
    for i, p in enumerate(pops_raw):
        if not isinstance(p, str) or not p:
            errors.append(f"pops[{i}]: must be a non-empty string, got {p!r}")
        elif p in pops:
            errors.append(f"pops[{i}]: duplicate PoP {p!r}")
        else:
            pops.append(p)
    if "pops" in raw and pops_raw == [] and isinstance(raw["pops"], list):
        errors.append("pops: at least one PoP is required")

    inv = _read(_InventoryIn, raw.get("inventory") if isinstance(raw.get("inventory"), dict) else None,
                "inventory", errors)
    # an inventory section with problems of its own (reported) lends no hosts to the checks below
    inventory = _inventory(inv, pops, base_dir, errors) if inv else Inventory(hosts={p: () for p in pops})

    arms: list[Arm] = []
    for i, a in _items(_ArmIn, raw.get("arms"), "arms", errors):
        if any(x.name == a.name for x in arms):
            errors.append(f"arms[{i}].name: duplicate arm {a.name!r}")
        arms.append(Arm(a.name, a.cc, a.bbr_version, a.qdisc))
    if isinstance(raw.get("arms"), list) and len(raw["arms"]) < 2:
        errors.append("arms: at least two arms (a control and a treatment) are required")
    names = [a.name for a in arms]
    control = top.control_arm if top else raw.get("control_arm") if isinstance(raw.get("control_arm"), str) else None
    if control is not None and arms and control not in names:
        errors.append(f"control_arm: {control!r} is not an arm ({', '.join(names)})")

    d = _read(_DesignIn, raw["design"], "design", errors) if isinstance(raw.get("design"), dict) else None
    sb = None
    if d is not None and d.switchback is not None:
        s = d.switchback
        for i, a in enumerate(s.arms):
            if a not in names:
                errors.append(f"design.switchback.arms[{i}]: {a!r} is not an arm ({', '.join(names)})")
        if len(s.arms) < 2:
            errors.append("design.switchback.arms: at least two arms alternate")
        sb = Switchback(s.period_minutes, s.periods, tuple(s.arms))
    design = Design(seed=d.seed if d else 0, pairing=d.pairing if d else False, switchback=sb)

    stages: list[Stage] = []
    if isinstance(raw.get("stages"), list) and not raw["stages"]:
        errors.append("stages: at least one stage is required")
    for i, s in _items(_StageIn, raw.get("stages"), "stages", errors, n_pops=len(pops)):
        p = f"stages[{i}]"
        if s.fraction is None and s.fractions is None and s.hosts is None:
            errors.append(f"{p}.fraction: required (or {p}.hosts, or {p}.fractions to vary it across PoPs)")
        stages.append(Stage(s.name if s.name is not None else f"stage{i + 1}", s.fraction, s.hosts,
                            s.min_duration_minutes, s.looks, s.min_applied,
                            tuple(s.fractions) if s.fractions is not None else None,
                            _segment(s.segment, f"{p}.segment", errors)))

    lim = _read(_LimitsIn, raw.get("limits") if isinstance(raw.get("limits"), dict) else None, "limits", errors)
    limits = Limits(**lim.model_dump()) if lim else Limits()

    guardrails = []
    for i, g in _items(_GuardrailIn, raw.get("guardrails"), "guardrails", errors):
        try:
            guardrails.append(Guardrail(g.metric, g.statistic, g.margin, g.severity, g.segment))
        except ValueError as exc:
            errors.append(f"guardrails[{i}].{'segment' if 'segment must' in str(exc) else 'margin'}: {exc}")
    breakers = [Breaker(b.metric, b.ratio, b.minutes) for _, b in _items(_BreakerIn, raw.get("breakers"), "breakers", errors)]

    pol = _read(_PolicyIn, raw.get("policy") if isinstance(raw.get("policy"), dict) else None, "policy", errors)
    policy = Policy(**pol.model_dump()) if pol else Policy()

    plan = Plan(rollout_id=top.rollout_id if top else str(raw.get("rollout_id") or ""), pops=tuple(pops),
                inventory=inventory, arms=tuple(arms), control_arm=control or "", design=design,
                stages=tuple(stages), limits=limits, guardrails=tuple(guardrails), breakers=tuple(breakers),
                policy=policy, description=top.description if top else "", source=source,
                pre_period_hours=top.pre_period_hours if top else 168)
    if not errors:
        errors.extend(_cross_checks(plan))
    if errors:
        raise PlanError(errors, source)
    return _with_digest(plan)


_SEGMENT_RE = re.compile(r"^(access:(mobile|fixed|satellite|hosting)|country:[A-Z]{2}|asn:[1-9][0-9]{0,9})$")


def _segment(raw: Any, p: str, errors: list[str]) -> tuple[str, ...] | None:
    """``stages[i].segment``: one segment or a list of them (their union), each a client-network
    segment that names networks (not ``access:unknown``, ``asn:other``)."""
    if raw is None:
        return None
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else None
    if not items:
        errors.append(f"{p}: want a segment (access:mobile, country:JP, asn:64500) or a non-empty list of them")
        return None
    for i, seg in enumerate(items):
        if not isinstance(seg, str) or not _SEGMENT_RE.match(seg):
            errors.append(f"{p}{'' if isinstance(raw, str) else f'[{i}]'}: {seg!r} is not a segment that names "
                          f"networks (access:mobile|fixed|satellite|hosting, country:<ISO code>, asn:<number>)")
            return None
    if len(set(items)) != len(items):
        errors.append(f"{p}: a segment appears twice")
        return None
    return tuple(items)


def _inventory(inv: _InventoryIn, pops: list[str], base_dir: Path | None, errors: list[str]) -> Inventory:
    """The hosts of each PoP, from ``inventory.hosts`` and ``inventory.file``: each host once, in a
    PoP the plan lists."""
    hosts: dict[str, list[str]] = {p: [] for p in pops}
    seen: dict[str, str] = {}

    def add(pop: Any, host: Any, where: str) -> None:
        if not isinstance(host, str) or not host:
            errors.append(f"{where}: host must be a non-empty string, got {host!r}")
        elif pop not in hosts:
            errors.append(f"{where}: PoP {pop!r} is not in pops ({', '.join(pops) or 'none'})")
        elif host in seen:
            errors.append(f"{where}: duplicate host {host!r} (also in {seen[host]})")
        else:
            seen[host] = where
            hosts[pop].append(host)

    for pop, lst in (inv.hosts or {}).items():
        for i, host in enumerate(lst):
            add(pop, host, f"inventory.hosts.{pop}[{i}]")
    if inv.file is not None:
        fp = Path(inv.file)
        if not fp.is_absolute() and base_dir is not None:
            fp = base_dir / fp
        try:
            lines = fp.read_text().splitlines()
        except OSError as exc:
            errors.append(f"inventory.file: cannot read {fp}: {exc.strerror or exc}")
            lines = None
        if lines is not None and not any(line.split("#", 1)[0].strip() for line in lines):
            errors.append(f"inventory.file: {fp} lists no hosts (one 'POP HOST' per line)")
        for n, line in enumerate(lines or [], 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                errors.append(f"inventory.file: {fp.name} line {n}: expected 'POP HOST', got {line!r}")
                continue
            add(parts[0], parts[1], f"inventory.file {fp.name} line {n}")
    if inv.hosts is None and inv.file is None and not inv.from_heartbeats:
        errors.append("inventory: give hosts, file or from_heartbeats: true")
    return Inventory(hosts={p: tuple(v) for p, v in hosts.items()}, file=inv.file,
                     from_heartbeats=inv.from_heartbeats)


def _cross_checks(plan: Plan) -> list[str]:
    out = []
    t = len(plan.treatment_arms)
    for i, st in enumerate(plan.stages):
        for pop in plan.pops:
            n = len(plan.hosts_of(pop))
            if n == 0:
                continue
            per = plan.per_arm(st, pop)
            key = "hosts" if st.hosts is not None else "fractions" if st.fractions else "fraction"
            if per < 1:
                out.append(f"stages[{i}].{key}: gives 0 hosts per arm in {pop} ({n} hosts)")
            elif per * t > n - plan.limits.min_control_hosts:
                out.append(f"stages[{i}].{key}: {per} hosts x {t} treatment arm(s) in {pop} leaves fewer than "
                           f"limits.min_control_hosts={plan.limits.min_control_hosts} of {n} hosts on control")
        if i and plan.stages[i - 1].name == st.name:
            out.append(f"stages[{i}].name: duplicate stage name {st.name!r}")
    for i in range(1, len(plan.stages)):
        for pop in plan.pops:
            if plan.per_arm(plan.stages[i], pop) < plan.per_arm(plan.stages[i - 1], pop):
                out.append(f"stages[{i}]: smaller than stages[{i - 1}] in {pop}; stages only grow")
    segs = {st.segment for st in plan.stages}
    if len(segs) > 1:
        out.append("stages[*].segment: every stage targets the same segment (or none): the judge compares one "
                   f"segment across the rollout, got {sorted(' '.join(x) if x else 'none' for x in segs)}")
    if plan.segment and plan.design.switchback:
        out.append("stages[0].segment: not with design.switchback")
    if plan.design.pairing and plan.design.switchback:
        out.append("design.pairing: not with design.switchback (a switchback flips whole PoPs)")
    return out


def plan_as_dict(plan: Plan) -> dict:
    d = asdict(plan)
    for st in d["stages"]:
        if st.get("fractions") is None:
            st.pop("fractions", None)  # plans written before the option keep their digest
        if st.get("segment") is None:
            st.pop("segment", None)  # likewise
    d.pop("digest", None)
    d.pop("source", None)
    if d.get("pre_period_hours") == 168:
        d.pop("pre_period_hours")  # the default: plans written before the option keep their digest
    d["inventory"].pop("file", None)  # the hosts it gave are what counts
    return d


def plan_to_yaml(plan: Plan) -> str:
    """The plan, resolved (inventory hosts listed), as a plan file that loads to the same digest."""
    raw: dict = {"rollout_id": plan.rollout_id}
    if plan.description:
        raw["description"] = plan.description
    raw["pops"] = list(plan.pops)
    raw["inventory"] = {"hosts": {p: list(h) for p, h in plan.inventory.hosts.items()},
                        "from_heartbeats": plan.inventory.from_heartbeats}
    raw["arms"] = [{k: v for k, v in (("name", a.name), ("cc", a.cc), ("bbr_version", a.bbr_version),
                                      ("qdisc", a.qdisc)) if v is not None} for a in plan.arms]
    raw["control_arm"] = plan.control_arm
    d: dict = {"seed": plan.design.seed, "pairing": plan.design.pairing}
    if plan.design.switchback:
        sb = plan.design.switchback
        d["switchback"] = {"period_minutes": sb.period_minutes, "periods": sb.periods, "arms": list(sb.arms)}
    raw["design"] = d
    raw["stages"] = [{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items() if v is not None}
                     for s in plan.stages]
    raw["limits"] = {k: v for k, v in asdict(plan.limits).items() if v is not None}
    raw["guardrails"] = [asdict(g) for g in plan.guardrails]
    raw["breakers"] = [{"metric": b.metric, "ratio": b.ratio, "minutes": b.minutes} for b in plan.breakers]
    raw["policy"] = asdict(plan.policy)
    if plan.pre_period_hours != 168:
        raw["pre_period_hours"] = plan.pre_period_hours
    return "# resolved copy of the plan this rollout was started with (ccab rollout start)\n" + \
        yaml.safe_dump(raw, sort_keys=False)


def _with_digest(plan: Plan) -> Plan:
    from dataclasses import replace

    body = json.dumps(plan_as_dict(plan), sort_keys=True, separators=(",", ":"), default=list)
    return replace(plan, digest=hashlib.sha256(body.encode()).hexdigest())


def with_hosts(plan: Plan, extra: dict[str, list[str]]) -> Plan:
    """The plan with hosts seen in heartbeats added (sorted, after the file's hosts)."""
    from dataclasses import replace

    hosts = {p: list(v) for p, v in plan.inventory.hosts.items()}
    known = {h for v in hosts.values() for h in v}
    for pop, lst in extra.items():
        if pop in hosts:
            hosts[pop].extend(sorted(h for h in set(lst) if h not in known))
    inv = replace(plan.inventory, hosts={p: tuple(v) for p, v in hosts.items()})
    return _with_digest(replace(plan, inventory=inv))

