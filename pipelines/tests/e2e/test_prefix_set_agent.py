"""A segment far larger than one assignment record, end to end: the networks dictionary (real chdb)
resolves ``access:mobile`` to 50,000 prefixes; the real controller publishes them as a signed
``prefix_set/1`` in chunks on a real broker, then ``assignment/3`` records naming it; the real
``ccab-agent`` binary (a network namespace as the host, its sock_ops program on a cgroup of this
test's own) fetches and verifies the set and loads it into the kernel's policy map. The map is read
back with ``bpftool`` (not the agent's code): its content is the segment, and the kernel's LPM lookups
agree with Python's ``ipaddress`` on random addresses. The rollback empties the map.

Needs root (namespaces, cgroups, BPF), ``ip``, ``bpftool`` and Go; skipped otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import random
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from agents import VECTORS, Agent, agent_args, build_agent, host_namespaces
from factories import base_plan

pytestmark = pytest.mark.kafka

DEADLINE_S = 90.0


def read_all(bootstrap: str, topic: str) -> list[dict]:
    """Every record of topic (the controller's own reader: low to high watermark)."""
    from ccab.rollout.publish import read_topic

    return [json.loads(v) for _k, v in read_topic(bootstrap, topic) if v]


def wait_for(what: str, cond) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} not reached within {DEADLINE_S} s")


def _cgroup2() -> Path:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        f = line.split()
        if len(f) > 2 and f[2] == "cgroup2":
            return Path(f[1])
    pytest.skip("no cgroup v2 hierarchy mounted")


def _bpftool(*args: str) -> object:
    out = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)


def _policy_map_id(pin: Path) -> int | None:
    """The id of the trie in the program's policy slot (None: no policy map)."""
    rows = _bpftool("map", "dump", "pinned", str(pin / "policy_outer")) or []
    for r in rows:
        if "inner_map_id" in r:
            return int(r["inner_map_id"])
        if "value" in r:
            return int.from_bytes(bytes(int(x, 16) for x in r["value"]), "little")
    return None


def _key_prefix(key: list[str]) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    b = bytes(int(x, 16) for x in key)
    bits, addr = int.from_bytes(b[:4], "little"), ipaddress.IPv6Address(b[4:20])
    if addr.ipv4_mapped is not None and bits >= 96:
        return ipaddress.ip_network(f"{addr.ipv4_mapped}/{bits - 96}")
    return ipaddress.ip_network(f"{addr}/{bits}")


def _policy_map(pin: Path) -> dict[str, tuple[int, str]]:
    """prefix -> (generation, cc) of the policy map, read by bpftool."""
    mid = _policy_map_id(pin)
    if mid is None:
        return {}
    out = {}
    for r in _bpftool("map", "dump", "id", str(mid)) or []:
        v = bytes(int(x, 16) for x in r["value"])
        out[str(_key_prefix(r["key"]))] = (int.from_bytes(v[:8], "little"), v[8:].split(b"\0")[0].decode())
    return out


def _kernel_lookup(mid: int, addr) -> str | None:
    """The kernel's longest-prefix match for addr (bpftool map lookup): the matched cc or None."""
    mapped = addr if addr.version == 6 else ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + addr.packed)
    key = (128).to_bytes(4, "little") + mapped.packed
    r = _bpftool("map", "lookup", "id", str(mid), "key", "hex", *[f"{b:02x}" for b in key])
    if r is None:
        return None
    v = bytes(int(x, 16) for x in r["value"])
    return v[8:].split(b"\0")[0].decode()


def _networks(n_mobile: int):
    """n_mobile mobile networks (/24s, some /20s and IPv6 /48s) and as many fixed ones, none inside another."""
    from ccab.cohorts.networks import Network

    nets = []
    for i in range(n_mobile):
        if i % 50 == 0:
            nets.append(Network(f"2001:db8:{i // 50:x}::/48", 64501, "Mobile", "JP", "mobile"))
        elif i % 50 == 1:
            j = i // 50
            nets.append(Network(f"100.{64 + j // 16}.{j % 16 * 16}.0/20", 64501, "Mobile", "JP", "mobile"))
        else:
            nets.append(Network(f"{11 + i // 65536}.{(i // 256) % 256}.{i % 256}.0/24", 64501, "Mobile", "JP", "mobile"))
        nets.append(Network(f"{51 + i // 65536}.{(i // 256) % 256}.{i % 256}.0/24", 64502, "Fixed", "JP", "fixed"))
    return list({n.network: n for n in nets}.values())


@pytest.fixture(scope="module")
def agent_bin(tmp_path_factory) -> Path:
    return build_agent(tmp_path_factory)


def test_large_segment_from_networks_through_kafka_into_the_agents_policy_map(agent_bin, kafka_broker, fresh_topic,
                                                                              warehouse, tmp_path):
    if not shutil.which("bpftool"):
        pytest.skip("bpftool is not installed")
    from ccab.rollout.publish import wire
    from ccab.cohorts import networks
    from ccab.rollout.analysis import Analysis
    from ccab.rollout.bus import KafkaBus
    from ccab.rollout.controller import Controller
    from ccab.rollout.plan import plan_from_dict
    from ccab.rollout.signing import load_private_key
    from ccab.rollout.state import Store

    nets = _networks(50_000)
    networks.load(warehouse, nets, "test", "ccab")
    segment = networks.segment_prefixes(warehouse, ["access:mobile"])
    assert len(segment) == 50_000

    asg = fresh_topic("ccab.assignments", partitions=1, config={"cleanup.policy": "compact"})
    st = fresh_topic("ccab.agent_status", partitions=1)
    sets = fresh_topic("ccab.prefix_sets", partitions=1, config={"cleanup.policy": "compact",
                                                                  "max.message.bytes": "1048576"})
    plan = plan_from_dict(base_plan(arms=[{"name": "control", "cc": "cubic"}, {"name": "b1", "cc": "reno"}],
                                    stages=[{"name": "s1", "hosts": 1, "segment": "access:mobile"}]))
    bus = KafkaBus(kafka_broker, asg, st, timeout_s=30, prefix_sets_topic=sets)
    ctl = Controller(plan, Store(tmp_path / "state" / plan.rollout_id), bus,
                     load_private_key(VECTORS / "test_ed25519_seed.hex"),
                     analysis=Analysis(judge=lambda *a: [], segment_prefixes=lambda seg: networks.segment_prefixes(
                         warehouse, seg)))
    ctl.start()
    chunks = read_all(kafka_broker, sets)
    assert len(chunks) > 50 and all(len(wire(c)) <= 16384 for c in chunks)
    treated = [r for r in read_all(kafka_broker, asg) if r["schema"] == "assignment/3"]
    assert treated and all(len(wire(r)) <= 16384 for r in treated)
    host, gen = treated[0]["host"], treated[0]["generation"]

    cg = _cgroup2() / f"segset-e2e-{uuid.uuid4().hex[:8]}"
    pin = Path("/sys/fs/bpf") / f"segset-e2e-{uuid.uuid4().hex[:8]}"
    cg.mkdir()
    agent = None
    try:
        with host_namespaces(f"segset-e2e-{uuid.uuid4().hex[:6]}") as (ns,):
            args = agent_args(kafka_broker, asg, st, host, ns, tmp_path / "agent-state.json", "1s")
            args += ["--sockpolicy-cgroup", str(cg), "--sockpolicy-pin-dir", str(pin), "--prefix-sets-topic", sets,
                     "--bpf-cc=false"]
            agent = Agent(agent_bin, args, tmp_path / "agent.log")
            agent.start()

            def status_is(state: str, g: int):
                return lambda: any(s.get("host") == host and s.get("generation") == g and s.get("state") == state
                                   for s in read_all(kafka_broker, st))
            try:
                wait_for(f"{host} applied generation {gen}", status_is("applied", gen))
            except AssertionError:
                raise AssertionError(f"{(tmp_path / 'agent.log').read_text()[-3000:]}\n"
                                     f"{[s for s in read_all(kafka_broker, st) if s.get('state') != 'heartbeat']}")
            # the kernel's map, read by bpftool, is the segment
            content = _policy_map(pin)
            assert set(content) == set(segment)
            assert {v for v in content.values()} == {(gen, "reno")}
            # the kernel's longest-prefix match against ipaddress on random addresses
            mid = _policy_map_id(pin)
            nets_in = [ipaddress.ip_network(p) for p in segment]
            by_len = {}
            for n in nets_in:
                by_len.setdefault((n.version, n.prefixlen), set()).add(n)
            rng = random.Random(32)
            hits = 0
            for i in range(150):
                base = rng.choice(nets_in) if i % 3 else ipaddress.ip_network(rng.choice(nets).network)
                addr = base[rng.randrange(base.num_addresses)] if base.num_addresses > 1 else base.network_address
                want = any(ipaddress.ip_network(f"{addr}/{bits}", strict=False) in by_len.get((addr.version, bits), ())
                           for bits in range(addr.max_prefixlen + 1))
                got = _kernel_lookup(mid, addr)
                assert (got == "reno") == want and (got is None) == (not want), (str(addr), got, want)
                hits += want
            assert 50 <= hits < 150  # both outcomes exercised

            # rollback: assignment/1 for every host, the agent empties the policy
            res = ctl.rollback("test: rollback empties the policy")
            g2 = max(r["generation"] for r in res.published if r["host"] == host)
            wait_for(f"{host} applied the rollback {g2}", status_is("applied", g2))
            assert _policy_map(pin) == {}
    finally:
        if agent is not None:
            agent.stop()
        for name in ("link", "policy_outer", "conn_policy", "stats"):
            (pin / name).unlink(missing_ok=True)
        if pin.exists():
            pin.rmdir()
        cg.rmdir()
