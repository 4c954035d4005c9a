"""Valid contract records for tests, built from the contract vectors (so they stay realistic)."""

from __future__ import annotations

import json

from paths import VECTORS

_SS = [json.loads(line) for line in (VECTORS / "ss_tinHOe_iproute2-6.1.expected.jsonl").read_text().splitlines()]
_NGINX = [json.loads(line) for line in (VECTORS / "nginx_ccab_json.expected.jsonl").read_text().splitlines()]
BASE_TS_MS = 1763769600000


def tcp_sample(i: int, **override) -> dict:
    rec = {"schema": "tcp_sample/1", **_SS[i % len(_SS)]}  # schema first, as the collector writes it
    rec.update(ts_ms=BASE_TS_MS + i, pop="tyo1", host=f"edge-tyo1-{i % 8:02d}",
               kernel="6.1.0-18-amd64", arm="control" if i % 2 else "bbr2", rollout_id="r1",
               sock_id=f"s{i:08x}", state="ESTAB", sample_rate=1.0)
    rec.update(override)
    return rec


def http_request(i: int, **override) -> dict:
    rec = dict(_NGINX[i % len(_NGINX)])
    rec.update(ts_ms=BASE_TS_MS + i, pop="tyo1", host=f"edge-tyo1-{i % 8:02d}", kernel="6.1.0-18-amd64",
               arm="control", rollout_id="r1", cc="cubic", conn_serial=i, sample_rate=1.0)
    rec.update(override)
    return rec


def line(rec: dict) -> bytes:
    return json.dumps(rec, separators=(",", ":")).encode()


# --- rollout plans


def base_plan(**over) -> dict:
    raw = {
        "rollout_id": "r1",
        "pops": ["p1", "p2"],
        "inventory": {"hosts": {"p1": [f"h1-{i:02d}" for i in range(12)], "p2": [f"h2-{i:02d}" for i in range(9)]}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "b1", "cc": "bbr"}, {"name": "b2", "cc": "bbr2"}],
        "control_arm": "control",
        "design": {"seed": 7},
        "stages": [{"name": "s1", "hosts": 1}, {"name": "s2", "fraction": 0.3}],
        "limits": {"max_hosts_per_pop_per_step": 3, "min_control_hosts": 2},
        "guardrails": [{"metric": "retrans_pct", "statistic": "ratio", "margin": 2.5}],
    }
    raw.update(over)
    return raw
