"""Operators' mistakes around a rollout that must not cost anything (issue 29): keygen over an
existing key pair, and the demo script run with a broken plan."""

from __future__ import annotations

import json
import os
import subprocess

from ccab import cli
from paths import REPO


def test_keygen_refuses_to_replace_a_pair_unless_forced(tmp_path, capsys):
    keys = tmp_path / "keys"
    assert cli.main(["rollout", "keygen", "--out", str(keys)]) == 0
    seed = (keys / "rollout_ed25519_seed.hex").read_text()
    pub = (keys / "rollout_ed25519_public.b64").read_text()
    capsys.readouterr()
    assert cli.main(["rollout", "keygen", "--out", str(keys)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ccab rollout: ") and "rollout_ed25519_seed.hex exists" in err and "--force" in err, err
    assert err.count("\n") == 1
    assert (keys / "rollout_ed25519_seed.hex").read_text() == seed  # untouched
    (keys / "rollout_ed25519_seed.hex").unlink()  # half a pair: the public key is still trusted somewhere
    assert cli.main(["rollout", "keygen", "--out", str(keys)]) == 2
    assert (keys / "rollout_ed25519_public.b64").read_text() == pub
    assert cli.main(["rollout", "keygen", "--out", str(keys), "--name", "other"]) == 0
    assert cli.main(["rollout", "keygen", "--out", str(keys), "--force"]) == 0
    assert (keys / "rollout_ed25519_public.b64").read_text() != pub


def test_demo_rollout_checks_the_plan_before_deleting_the_previous_rollout(tmp_path):
    data = tmp_path / "data"
    previous = data / "rollouts" / "tyo1-bbr-canary"
    previous.mkdir(parents=True)
    (previous / "audit.jsonl").write_text('{"seq": 1, "event": "started"}\n')
    bad = tmp_path / "plan.yaml"
    bad.write_text("rollout_id: tyo1-bbr-canary\nnonsense: [\n")
    env = {**os.environ, "CCAB_DATA_DIR": str(data), "DEMO_ROLLOUT_PLAN": str(bad),
           "PYTHONPATH": str(REPO / "pipelines"), "CCAB_KAFKA_BROKERS": "127.0.0.1:1"}
    res = subprocess.run(["bash", str(REPO / "scripts" / "demo-rollout.sh")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "does not validate" in res.stderr and "nothing was started or deleted" in res.stderr
    assert (previous / "audit.jsonl").exists()
    assert not (data / "kafka").exists()  # no broker was started for a plan that cannot run


def test_rollout_list(tmp_path, monkeypatch, capsys):
    from ccab.rollout.state import RolloutState, Store

    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    assert cli.main(["rollout", "list"]) == 0
    assert capsys.readouterr().out.startswith("no rollouts in ")
    for rid, status, updated in (("tyo1-old", "completed", 1_700_000_000_000), ("tyo1-new", "running", 1_800_000_000_000)):
        store = Store.for_rollout(rid)
        store.dir.mkdir(parents=True)
        store.save(RolloutState(rid, "d", "plan.yaml", status=status, stage=1, arms={"bbr": "active"},
                                started_ms=updated - 3_600_000, updated_ms=updated))
    broken = tmp_path / "data" / "rollouts" / "tyo1-broken"
    broken.mkdir()
    (broken / "state.json").write_text("{not json")
    capsys.readouterr()
    assert cli.main(["rollout", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["tyo1-new", "tyo1-old", "tyo1-broken"], lines
    assert "running" in lines[0] and "arms: bbr active" in lines[0] and "unreadable: cannot read" in lines[2]
    assert cli.main(["rollout", "list", "--json"]) == 0
    assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["running", "completed", "unreadable"]


def _closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_status_with_kafka_down_says_applied_unknown_and_when_the_next_look_is(tmp_path, monkeypatch, capsys):
    import shutil
    import time

    from ccab.rollout.plan import load_plan
    from ccab.rollout.state import HostAssignment, RolloutState, Store

    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_KAFKA_BROKERS", f"127.0.0.1:{_closed_port()}")
    src = REPO / "rollout" / "plans" / "tyo1-bbr-canary.yaml"
    plan = load_plan(src)
    store = Store.for_rollout(plan.rollout_id)
    store.dir.mkdir(parents=True)
    shutil.copy(src, store.plan_file)
    shutil.copy(src.parent / "tyo1-hosts.txt", store.dir / "tyo1-hosts.txt")
    now = int(time.time() * 1000)
    hosts = {h: HostAssignment(pop="tyo1", arm="control", cc="cubic", qdisc="fq", generation=1, status="published",
                               record={}) for h in plan.hosts_of("tyo1")[:10]}
    store.save(RolloutState(plan.rollout_id, plan.digest, str(src), stage=0, arms={"bbr1": "active", "bbr2": "active"},
                            started_ms=now - 600_000, stage_started_ms=now - 600_000, stage_applied_ms=now - 300_000,
                            hosts=hosts, updated_ms=now))
    capsys.readouterr()
    assert cli.main(["rollout", "status", plan.rollout_id, "--kafka-timeout", "1"]) == 0
    out = capsys.readouterr().out
    assert f"applied: unknown (Kafka unreachable: the agents' answers could not be read; {len(hosts)} enrolled)" in out, out
    assert "applied: 0/" not in out
    assert "next look: " in out and " UTC (in " in out, out


def test_a_finished_rollouts_status_names_hosts_other_rollouts_moved(tmp_path, monkeypatch, capsys):
    import shutil
    import time

    from ccab.rollout.plan import load_plan
    from ccab.rollout.state import HostAssignment, RolloutState, Store

    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    src = REPO / "rollout" / "plans" / "tyo1-bbr-canary.yaml"
    plan = load_plan(src)
    hosts = plan.hosts_of("tyo1")
    now = int(time.time() * 1000)

    def host(arm):
        return HostAssignment(pop="tyo1", arm=arm, cc="bbr", qdisc="fq", generation=1, status="published", record={})

    store = Store.for_rollout(plan.rollout_id)
    store.dir.mkdir(parents=True)
    shutil.copy(src, store.plan_file)
    shutil.copy(src.parent / "tyo1-hosts.txt", store.dir / "tyo1-hosts.txt")
    store.save(RolloutState(plan.rollout_id, plan.digest, str(src), status="completed", arms={"bbr2": "promoted"},
                            hosts={h: host("bbr2") for h in hosts}, updated_ms=now - 86_400_000))
    later = Store.for_rollout("tyo1-bbr3-trial")
    later.dir.mkdir(parents=True)
    later.save(RolloutState("tyo1-bbr3-trial", "d", "p.yaml", arms={"bbr3": "active"},
                            hosts={h: host("bbr3") for h in hosts[:3]}, updated_ms=now))
    capsys.readouterr()
    assert cli.main(["rollout", "status", plan.rollout_id, "--offline"]) == 0
    out = capsys.readouterr().out
    assert "hosts per arm, as this rollout left them: " in out and "— 3 of them since moved by tyo1-bbr3-trial (3)" in out, out
