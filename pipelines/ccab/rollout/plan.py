"""A rollout plan: YAML -> typed, validated dataclasses.

Every problem of a file is reported at once, each naming the field path
(``stages[1].fraction: must be in (0, 1], got 1.5``). The plan is refused at plan time for
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
from typing import Any

import yaml
from ccab.base.contracts import rollout_id_problem
from ccab.base.vocabulary import JUDGED_METRICS, SEVERITIES, statistics_of
from ccab.judge.model import BREAKER_METRICS, Breaker, Guardrail

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


class _Reader:
    """Typed access to a YAML mapping that records problems instead of raising."""

    def __init__(self, errors: list[str]):
        self.errors = errors

    def mapping(self, raw: Any, path: str) -> dict:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.errors.append(f"{path}: must be a mapping, got {type(raw).__name__}")
            return {}
        return raw

    def unknown(self, raw: dict, allowed: tuple[str, ...], path: str) -> None:
        for k in raw:
            if k not in allowed:
                self.errors.append(f"{_join(path, str(k))}: unknown field (allowed: {', '.join(allowed)})")

    def get(self, raw: dict, key: str, path: str, kind: type | tuple, default: Any = ..., *,
            lo: float | None = None, hi: float | None = None, lo_open: bool = False,
            choices: tuple | None = None) -> Any:
        p = _join(path, key)
        if key not in raw or raw[key] is None:
            if default is ...:
                self.errors.append(f"{p}: required")
                return None
            return default
        v = raw[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
            names = "/".join(k.__name__ for k in kinds)
            self.errors.append(f"{p}: must be {names}, got {type(v).__name__} {v!r:.40}")
            return None if default is ... else default
        if choices is not None and v not in choices:
            self.errors.append(f"{p}: unknown value {v!r}; one of: {', '.join(map(str, choices))}")
            return None if default is ... else default
        if lo is not None or hi is not None:
            bad = (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi)
            if bad:
                lo_b = "(" if lo_open else "["
                rng = f"{lo_b}{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
                self.errors.append(f"{p}: must be in {rng}, got {v}")
                return None if default is ... else default
        return v

    def seq(self, raw: dict, key: str, path: str, required: bool = True) -> list:
        p = _join(path, key)
        v = raw.get(key)
        if v is None:
            if required:
                self.errors.append(f"{p}: required")
            return []
        if not isinstance(v, list):
            self.errors.append(f"{p}: must be a list, got {type(v).__name__}")
            return []
        return v


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


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
    errors: list[str] = []
    r = _Reader(errors)
    if not isinstance(raw, dict):
        raise PlanError([f"(top level): must be a mapping, got {type(raw).__name__}"], source)
    top = ("rollout_id", "description", "pops", "inventory", "arms", "control_arm", "design", "stages",
           "limits", "guardrails", "breakers", "policy", "pre_period_hours")
    r.unknown(raw, top, "")
    pre_period_hours = r.get(raw, "pre_period_hours", "", int, 168, lo=24)
    rollout_id = r.get(raw, "rollout_id", "", str)
    if isinstance(rollout_id, str) and rollout_id_problem(rollout_id):
        errors.append(f"rollout_id: {rollout_id_problem(rollout_id)}")
    description = r.get(raw, "description", "", str, "")
    pops_raw = r.seq(raw, "pops", "")
    pops = []
    for i, p in enumerate(pops_raw):
        if not isinstance(p, str) or not p:
            errors.append(f"pops[{i}]: must be a non-empty string, got {p!r}")
        elif p in pops:
            errors.append(f"pops[{i}]: duplicate PoP {p!r}")
        else:
            pops.append(p)
    if pops_raw == [] and "pops" in raw:
        errors.append("pops: at least one PoP is required")

    inventory = _inventory(r, r.mapping(raw.get("inventory"), "inventory"), pops, base_dir)

    arms: list[Arm] = []
    arm_list = r.seq(raw, "arms", "")
    for i, a in enumerate(arm_list):
        p = f"arms[{i}]"
        a = r.mapping(a, p)
        if not a:
            continue
        r.unknown(a, ("name", "cc", "bbr_version", "qdisc"), p)
        name = r.get(a, "name", p, str)
        cc = r.get(a, "cc", p, str)
        if cc is not None and cc not in KNOWN_CC:
            errors.append(f"{p}.cc: unknown congestion control {cc!r}; known: {', '.join(KNOWN_CC)}")
        ver = r.get(a, "bbr_version", p, int, None, lo=1, hi=3)
        if ver is not None and cc is not None and not cc.startswith("bbr"):
            errors.append(f"{p}.bbr_version: only for a bbr cc, not {cc!r}")
        qdisc = r.get(a, "qdisc", p, str, None)
        if qdisc is not None and qdisc not in KNOWN_QDISC:
            errors.append(f"{p}.qdisc: unknown qdisc {qdisc!r}; known: {', '.join(KNOWN_QDISC)}")
        if name is not None and any(x.name == name for x in arms):
            errors.append(f"{p}.name: duplicate arm {name!r}")
        if name is not None and cc is not None:
            arms.append(Arm(name, cc, ver, qdisc))
    if "arms" in raw and len(arm_list) < 2:
        errors.append("arms: at least two arms (a control and a treatment) are required")
    control = r.get(raw, "control_arm", "", str)
    names = [a.name for a in arms]
    if control is not None and arms and control not in names:
        errors.append(f"control_arm: {control!r} is not an arm ({', '.join(names)})")

    d = r.mapping(raw.get("design"), "design")
    if "design" not in raw:
        errors.append("design: required (at least design.seed, recorded for reproducibility)")
    r.unknown(d, ("seed", "pairing", "switchback", "stratify_by"), "design")
    if d.get("stratify_by", "pop") != "pop":
        errors.append(f"design.stratify_by: only 'pop' is supported, got {d.get('stratify_by')!r}")
    seed = r.get(d, "seed", "design", int, 0 if "design" not in raw else ..., lo=0)
    pairing = r.get(d, "pairing", "design", bool, False)
    sb = None
    if d.get("switchback") is not None:
        s = r.mapping(d["switchback"], "design.switchback")
        r.unknown(s, ("period_minutes", "periods", "arms"), "design.switchback")
        pm = r.get(s, "period_minutes", "design.switchback", int, lo=1)
        periods = r.get(s, "periods", "design.switchback", int, lo=2)
        sb_arms = r.seq(s, "arms", "design.switchback")
        for i, a in enumerate(sb_arms):
            if a not in names:
                errors.append(f"design.switchback.arms[{i}]: {a!r} is not an arm ({', '.join(names)})")
        if s and len(sb_arms) < 2:
            errors.append("design.switchback.arms: at least two arms alternate")
        if pm is not None and periods is not None:
            sb = Switchback(pm, periods, tuple(sb_arms))
    design = Design(seed=seed if seed is not None else 0, pairing=bool(pairing), switchback=sb)

    stages: list[Stage] = []
    stage_list = r.seq(raw, "stages", "")
    if "stages" in raw and not stage_list:
        errors.append("stages: at least one stage is required")
    for i, s in enumerate(stage_list):
        p = f"stages[{i}]"
        s = r.mapping(s, p)
        if not s:
            continue
        r.unknown(s, ("name", "fraction", "fractions", "hosts", "min_duration_minutes", "looks", "min_applied",
                      "segment"), p)
        name = r.get(s, "name", p, str, f"stage{i + 1}")
        frac = r.get(s, "fraction", p, float, None, lo=0, hi=1, lo_open=True)
        nh = r.get(s, "hosts", p, int, None, lo=1)
        fracs = _fractions(r, s, p, len(pops))
        given = [k for k in ("fraction", "fractions", "hosts") if k in s]
        if len(given) > 1:
            errors.append(f"{p}: give one of fraction, fractions or hosts, not {' and '.join(given)}")
        elif not given:
            errors.append(f"{p}.fraction: required (or {p}.hosts, or {p}.fractions to vary it across PoPs)")
        dur = r.get(s, "min_duration_minutes", p, int, 60, lo=0)
        looks = r.get(s, "looks", p, int, 1, lo=1, hi=100)
        ma = r.get(s, "min_applied", p, float, 1.0, lo=0, hi=1, lo_open=True)
        stages.append(Stage(name, frac, nh, dur, looks, ma, fracs, _segment(s.get("segment"), f"{p}.segment", errors)))

    lim = r.mapping(raw.get("limits"), "limits")
    r.unknown(lim, ("max_hosts_per_pop_per_step", "max_fraction_per_pop_per_step", "min_control_hosts"), "limits")
    limits = Limits(
        max_hosts_per_pop_per_step=r.get(lim, "max_hosts_per_pop_per_step", "limits", int, None, lo=1),
        max_fraction_per_pop_per_step=r.get(lim, "max_fraction_per_pop_per_step", "limits", float, None,
                                            lo=0, hi=1, lo_open=True),
        min_control_hosts=r.get(lim, "min_control_hosts", "limits", int, 2, lo=0),
    )

    guardrails = []
    for i, g in enumerate(r.seq(raw, "guardrails", "", required=False)):
        p = f"guardrails[{i}]"
        g = r.mapping(g, p)
        r.unknown(g, ("metric", "statistic", "margin", "severity", "segment"), p)
        metric = r.get(g, "metric", p, str, choices=JUDGED_METRICS)
        stat = r.get(g, "statistic", p, str)
        if metric is not None and stat is not None and stat not in statistics_of(metric):
            errors.append(f"{p}.statistic: the judge cannot compute {stat!r} for {metric}; "
                          f"one of: {', '.join(statistics_of(metric))}")
            stat = None
        margin = r.get(g, "margin", p, float, lo=0, lo_open=True)
        sev = r.get(g, "severity", p, str, "page", choices=SEVERITIES)
        seg = r.get(g, "segment", p, str, "all")
        if None not in (metric, stat, margin, sev, seg):
            try:
                guardrails.append(Guardrail(metric, stat, margin, sev, seg))
            except ValueError as exc:
                errors.append(f"{p}.{'segment' if 'segment must' in str(exc) else 'margin'}: {exc}")
    breakers = []
    for i, b in enumerate(r.seq(raw, "breakers", "", required=False)):
        p = f"breakers[{i}]"
        b = r.mapping(b, p)
        r.unknown(b, ("metric", "ratio", "minutes"), p)
        values = (r.get(b, "metric", p, str, "retrans_pct", choices=BREAKER_METRICS),
                  r.get(b, "ratio", p, float, 3.0, lo=1, lo_open=True), r.get(b, "minutes", p, int, 10, lo=1))
        if None not in values:
            breakers.append(Breaker(*values))

    pol = r.mapping(raw.get("policy"), "policy")
    r.unknown(pol, ("rollback", "halt", "no_decision", "inconclusive_by_design", "promote_on_pass"), "policy")
    policy = Policy(
        rollback=r.get(pol, "rollback", "policy", str, "rollback_arm", choices=ACTIONS),
        halt=r.get(pol, "halt", "policy", str, "halt_arm", choices=ACTIONS),
        no_decision=r.get(pol, "no_decision", "policy", str, "hold", choices=ACTIONS),
        inconclusive_by_design=r.get(pol, "inconclusive_by_design", "policy", str, "hold", choices=ACTIONS),
        promote_on_pass=r.get(pol, "promote_on_pass", "policy", bool, True),
    )

    plan = Plan(rollout_id=rollout_id or "", pops=tuple(pops), inventory=inventory, arms=tuple(arms),
                control_arm=control or "", design=design, stages=tuple(stages), limits=limits,
                guardrails=tuple(guardrails), breakers=tuple(breakers), policy=policy,
                description=description or "", source=source, pre_period_hours=pre_period_hours or 168)
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


def _fractions(r: _Reader, s: dict, p: str, n_pops: int) -> tuple[float, ...] | None:
    """``stages[i].fractions``: at least two different values in (0, 1], no more than PoPs."""
    raw = r.seq(s, "fractions", p, required=False)
    if "fractions" not in s or not isinstance(s.get("fractions"), list):
        return None
    out = []
    for j, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            r.errors.append(f"{p}.fractions[{j}]: must be a number in (0, 1], got {v!r:.40}")
        elif not 0 < v <= 1:
            r.errors.append(f"{p}.fractions[{j}]: must be in (0, 1], got {v}")
        else:
            out.append(float(v))
    if len(set(out)) < 2:
        r.errors.append(f"{p}.fractions: give at least two different fractions (one fraction for every PoP is "
                        f"{p}.fraction), got {raw!r:.60}")
    elif len(out) > n_pops > 0:
        r.errors.append(f"{p}.fractions: {len(out)} fractions but {n_pops} PoP(s): each PoP gets one, so some "
                        f"would go unused; give at most {n_pops} (the 'effect vs treated share' panel needs "
                        f"at least 3 PoPs)")
    return tuple(out) if len(out) == len(raw) else None


def _inventory(r: _Reader, inv: dict, pops: list[str], base_dir: Path | None) -> Inventory:
    errors = r.errors
    r.unknown(inv, ("hosts", "file", "from_heartbeats"), "inventory")
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

    h = inv.get("hosts")
    if h is not None:
        if not isinstance(h, dict):
            errors.append(f"inventory.hosts: must be a mapping pop -> list of hosts, got {type(h).__name__}")
        else:
            for pop, lst in h.items():
                if not isinstance(lst, list):
                    errors.append(f"inventory.hosts.{pop}: must be a list of hosts")
                    continue
                for i, host in enumerate(lst):
                    add(pop, host, f"inventory.hosts.{pop}[{i}]")
    file = r.get(inv, "file", "inventory", str, None)
    if file is not None:
        fp = Path(file)
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
    hb = r.get(inv, "from_heartbeats", "inventory", bool, False)
    if h is None and file is None and not hb:
        errors.append("inventory: give hosts, file or from_heartbeats: true")
    return Inventory(hosts={p: tuple(v) for p, v in hosts.items()}, file=file, from_heartbeats=bool(hb))


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

