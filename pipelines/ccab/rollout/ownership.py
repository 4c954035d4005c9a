"""Which rollout owns a host, as far as this data dir knows: a host belongs to at most one active
rollout (running, paused or halted). The assignments topic's view (another deployment on the same
Kafka) is the controller's ``topic_owners``."""

from __future__ import annotations

from pathlib import Path

from ccab.rollout.plan import Plan, load_plan
from ccab.rollout.state import StateError, Store

ACTIVE_STATUSES = ("running", "paused", "halted")  # a rollout in one of these owns its hosts


def plan_hosts(plan: Plan) -> set[str]:
    return {h for p in plan.pops for h in plan.hosts_of(p)}


def host_owners(root, exclude: str = "") -> dict[str, tuple[str, str]]:
    """host -> (rollout_id, status) for every rollout under ``root`` that still owns its hosts
    (running, paused or halted: not completed nor rolled back), except ``exclude``."""
    out: dict[str, tuple[str, str]] = {}
    root = Path(root)
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name == exclude:
            continue
        store = Store(d)
        try:
            st = store.load()
        except StateError:
            continue
        if st.status not in ACTIVE_STATUSES or st.rollout_id == exclude:
            continue
        hosts = set(st.hosts)
        try:
            hosts |= plan_hosts(load_plan(store.plan_file))
        except Exception:  # noqa: BLE001 - an unreadable plan copy: the state's hosts still count
            pass
        for h in hosts:
            out.setdefault(h, (st.rollout_id, st.status))
    return out


def overlap_message(rollout_id: str, clash: dict[str, tuple[str, str]]) -> str:
    by_owner: dict[tuple[str, str], list[str]] = {}
    for h, o in sorted(clash.items()):
        by_owner.setdefault(o, []).append(h)
    parts = [f"{len(hs)} host(s) ({', '.join(hs[:8])}{', ...' if len(hs) > 8 else ''}) belong to active rollout "
             f"{o[0]} ({o[1]})" for o, hs in by_owner.items()]
    return (f"rollout {rollout_id} overlaps: " + "; ".join(parts) + ". A host belongs to at most one active rollout: "
            f"finish or roll back the owner first (ccab rollout status {next(iter(by_owner))[0]}), "
            f"or take those hosts out of the plan")

