"""``ccab power`` when the rollups cannot size a canary yet (the soak's analysts: 5 of 51 commands
exited 1 with nothing on stderr): "not enough history" is an answer, printed with exit 0 like
``--json``'s ``[]``. Through the CLI on the session's warehouse service."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from paths import REPO

CCAB = [sys.executable, "-m", "ccab.cli"]
ARGS = ["power", "--metric", "retrans_pct", "--statistic", "ratio", "--mde", "0.2"]


def test_power_with_one_host_of_history_answers_not_enough_history_with_exit_0(warehouse_env):
    from ccab.pipeline import open_warehouse

    env = dict(os.environ)
    # one host, one hour of rollups (warehouse_env's database is migrated): a window needs at least 2 hosts
    with open_warehouse() as wh:
        wh.command("INSERT INTO cohort_hourly (hour, pop, arm, host, segment, metric, n, ratio_num, ratio_den) "
                   "SELECT toDateTime('2026-11-28 08:00:00', 'UTC'), 'lab', 'control', 'h1', 'all', 'retrans_pct', "
                   "10, 1, 100")
    p = subprocess.run([*CCAB, *ARGS], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout, p.stderr)  # was: exit 1, stderr empty
    assert p.stdout.strip().splitlines()[-1] == "not enough history: need at least 2 hosts in one window of 1 h"
    p = subprocess.run([*CCAB, *ARGS, "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout) == [], (p.stdout, p.stderr)


def test_power_on_empty_rollups_answers_not_enough_history_with_exit_0(warehouse_env, capsys):
    """The soak's analysts before the first hourly run: 8 `ccab power` exits 1 ("the rollups are
    empty") — the same answer as too little history, so the same exit code."""
    from ccab import cli

    capsys.readouterr()
    assert cli.main(ARGS) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "not enough history: the rollups are empty (load data and run `ccab analyze` first)"
    assert out.err == ""
    assert cli.main([*ARGS, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
