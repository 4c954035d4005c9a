"""Every `ccab` subcommand with the mistakes people make (issue #17): each answers with its exit
code and one line naming the problem, never a traceback, never a hang.

The table runs in-process (`ccab.cli.main`, fast); `test_a_real_process_with_kafka_down` runs the
two commands that used to hang as real processes. Kafka "down" is a loopback port nothing
listens on."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys

import pytest
from ccab import cli
from paths import REPO, SCENARIOS


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


@pytest.fixture(scope="module")
def env(tmp_path_factory, warehouse_service):
    """A data dir with the schema in (one for the module: the cases only read it), Kafka pointing
    at a closed port, and paths to misuse."""
    tmp_path = tmp_path_factory.mktemp("bad-inputs")
    mp = pytest.MonkeyPatch()
    mp.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    mp.setenv("CCAB_CLICKHOUSE_URL", f"{warehouse_service}/t_bad_inputs")
    mp.setenv("CCAB_KAFKA_BROKERS", f"127.0.0.1:{_closed_port()}")
    assert cli.main(["db", "migrate"]) == 0
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "plan.yaml").write_text((REPO / "rollout/plans/tyo1-bbr-canary.yaml").read_text().split("inventory:")[0]
                                        + "inventory:\n  file: empty.txt\n" + _after_inventory())
    yield tmp_path
    mp.undo()


def _after_inventory() -> str:
    text = (REPO / "rollout/plans/tyo1-bbr-canary.yaml").read_text()
    rest = text.split("inventory:", 1)[1].splitlines(keepends=True)
    i = next(i for i, line in enumerate(rest[1:], 1) if line.strip() and not line.startswith((" ", "\t")))
    return "".join(rest[i:])


# argv (with {tmp} for the test's folder), exit code, a regex the one line must match
CASES = [
    # ccab query: the statement, not ccab's plumbing
    (["query", "SELECT 1; SELECT 2"], 2, r"one statement at a time"),
    (["query", "SELECT 1 FORMAT CSV"], 2, r"FORMAT clause.*--format"),
    (["query", ""], 2, r"empty statement"),
    (["query", "   ;  "], 2, r"empty statement"),
    (["query", "SELEC 1"], 1, r"Syntax error"),
    (["query", "SELECT * FROM nope"], 1, r"nope"),
    (["query", "--max-rows", "-1", "SELECT 1"], 2, r"--max-rows"),
    # output paths that cannot be written
    (["report", "--rollout", "x", "--out", "{tmp}/a-file"], 2, r"a-file is a file"),
    (["report", "--rollout", "x", "--out", "/proc/nope/deeper"], 2, r"No such file or directory: /proc/nope"),
    (["report", "--rollout", "x", "--from", "2025-11-20T05:00Z", "--to", "2025-11-20T01:00Z"], 2, r"--from must be before --to"),
    # a reversed window is a usage error everywhere (issue 29: plot said exit 1 "nothing matched")
    (["plot", "cdf", "--metric", "rtt_us", "--from", "2025-11-20T05:00Z", "--to", "2025-11-20T01:00Z", "--out",
      "{tmp}/x.png"], 2, r"--from must be before --to"),
    (["report", "--rollout", "nope"], 1, r"no assignments, rollups or judge results .*ccab analyze"),
    (["sim", "tiny", "--out", "{tmp}/a-file"], 2, r"a-file is a file"),
    (["sim", "no-such-scenario", "--out", "{tmp}/s"], 2, r"no-such-scenario"),
    (["sim", "tiny", "--out", "{tmp}/s", "--connections", "0"], 2, r"--connections"),
    (["sim", "tiny", "--out", "{tmp}/s", "--start", "yesterday"], 2, r"--start"),
    # webhooks and Kafka
    (["alerts", "--notify", "not-a-url"], 2, r"not an http\(s\) URL"),
    (["analyze", "--from", "2025-11-20T00:00Z", "--to", "2025-11-20T01:00Z", "--notify", "ftp://x"], None, None),
    (["loader", "--exit-when-idle", "5", "--metrics-port", "0"], 1, r"Kafka is unreachable at 127\.0\.0\.1:\d+"),
    (["sim", "tiny", "--out", "{tmp}/k", "--to-kafka"], 1, r"Kafka is unreachable at 127\.0\.0\.1:\d+"),
    (["loader", "--topics", "nope=nope/9"], 2, r"nope"),
    # windows
    (["dags", "test", "ccab_cohorts_hourly", "--from", "2025-11-20T05:00Z", "--to", "2025-11-20T01:00Z"], 2,
     r"--to .* must be after --from"),
    (["dags", "test", "ccab_cohorts_hourly", "--from", "05:00Z", "--to", "06:00Z"], 2, r"not an ISO date"),
    (["analyze", "--from", "2025-11-20T05:00Z", "--to", "2025-11-20T01:00Z"], 2, r"must be after --from"),
    (["analyze", "--from", "2025-11-20T05:30Z", "--to", "2025-11-20T07:00Z"], 2, r"hour boundary"),
    (["power", "--metric", "retrans_pct", "--statistic", "ratio", "--mde", "5"], 2, r"--mde .*0\.05"),
    (["power", "--metric", "retrans_pct", "--statistic", "ratio", "--mde", "0.05",
      "--from", "2025-11-21T00:00Z", "--to", "2025-11-20T00:00Z"], 2, r"--from .* is not before --to"),
    (["power", "--metric", "nope", "--statistic", "ratio", "--mde", "0.05"], 2, r"nope"),
    # power on empty rollups is an answer, not an error: test_power_cli.py
    # files
    (["load", "{tmp}/a-dir"], 2, r"a-dir is a folder.*\*\.jsonl"),
    (["load", "{tmp}/no-such.jsonl"], 2, r"no such file: .*no-such\.jsonl"),
    (["rollout", "plan", "{tmp}/plan.yaml"], 2, r"empty\.txt lists no hosts"),
    (["plot", "pdf", "--metric", "retrans_pct", "--out", "{tmp}/x.png"], 1, r"rollups are empty"),
    # argparse's own errors: the subcommand's usage, the closest option
    (["query", "--formt", "csv", "SELECT 1"], 2, r"unrecognized arguments: --formt \(did you mean --format\?\)"),
    (["report", "--rolout", "x"], 2, r"did you mean --rollout\?"),
    (["dags", "test", "ccab_compare", "--frm", "2025-11-20T00:00Z", "--to", "2025-11-20T01:00Z"], 2,
     r"did you mean --from\?"),
    (["alerts", "--severity", "pages"], 2, r"invalid choice: 'pages'"),
    # unknown ids and bad values are errors, not "nothing found" (issue 29)
    (["alerts", "--rollout", "nope"], 2, r"--rollout 'nope': no such rollout in the warehouse \(known: none\)"),
    (["verdicts", "--rollout", "nope"], 2, r"--rollout 'nope': no such rollout"),
    (["networks", "lookup", "100.64.3.0/24", "notanip"], 2, r"'notanip' is not an IP address or prefix"),
    (["rollout", "halt", "tyo1-bbr-canary", "--reason", "  "], 2, r"--reason is empty: say why you halt"),
    (["plot", "cdf", "--metric", "nope", "--out", "x.png"], 2, r"invalid choice"),
    (["no-such-command"], 2, r"invalid choice: 'no-such-command'"),
]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv,code,pattern", [c for c in CASES if c[1] is not None],
                         ids=[" ".join(c[0])[:60] for c in CASES if c[1] is not None])
def test_a_mistake_gives_one_line_and_its_exit_code(env, capsys, argv, code, pattern):
    argv = [a.replace("{tmp}", str(env)) for a in argv]
    got, out, err = _run(argv, capsys)
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, f"no message for {argv}"
    # one headline naming the problem; argparse prints its usage before it, and a validator
    # with several problems (a plan, a scenario) lists them indented under it
    message = [line for line in lines if not line.startswith(("usage:", " "))]
    assert len(message) == 1, err
    assert message[0].startswith("ccab"), message[0]
    assert re.search(pattern, err), err
    assert "SETTINGS output_format" not in message[0] and "readonly=2" not in message[0] \
        and "readonly = 2" not in message[0]  # ccab's own suffix never shows
    assert got == code, (got, err)
    if lines[0].startswith("usage:"):  # the usage of the subcommand given, not the top level
        assert lines[0].startswith(f"usage: ccab {argv[0]}") or argv[0] == "no-such-command", lines[0]


def test_an_unexpected_error_is_one_line_naming_the_log(env, capsys, monkeypatch):
    def boom(_args):
        raise KeyError("a bug")

    monkeypatch.setattr("ccab.cli.env._cmd_env", boom)
    code, out, err = _run(["env"], capsys)
    assert code == 1 and "Traceback" not in out + err
    [line] = err.splitlines()
    assert line.startswith("ccab env: unexpected error: KeyError") and "please report it" in line
    log = re.search(r"details in (\S+\.log)", line).group(1)
    assert log.startswith(str(env / "data" / "logs")) and "KeyError: 'a bug'" in open(log).read()


def _leaves(parser: argparse.ArgumentParser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, p in subs[0].choices.items():
        yield from _leaves(p, path + (name,))


LEAVES = list(_leaves(cli.build_parser()))


@pytest.mark.parametrize("path", [p for p, _ in LEAVES], ids=[" ".join(p) for p, _ in LEAVES])
def test_every_subcommand_names_a_misspelled_option_in_its_own_usage(path, capsys):
    code, out, err = _run([*path, "--no-such-option"], capsys)
    assert code == 2 and "Traceback" not in out + err
    assert err.startswith(f"usage: ccab {' '.join(path)}"), err
    assert err.splitlines()[-1].startswith(f"ccab {' '.join(path)}: error: unrecognized arguments: --no-such-option")


HELP_EXEMPT: set[str] = set()  # every command group's options have help


@pytest.mark.parametrize("path", [p for p, _ in LEAVES if p[0] not in HELP_EXEMPT],
                         ids=[" ".join(p) for p, _ in LEAVES if p[0] not in HELP_EXEMPT])
def test_every_option_has_help_text(path):
    parser = dict(LEAVES)[path]
    missing = [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
               if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not missing, f"ccab {' '.join(path)}: no help for {missing}"
    for a in parser._actions:
        assert not (a.choices and "" in list(a.choices)), f"ccab {' '.join(path)} {a.option_strings}: an empty choice"


def test_a_real_process_with_kafka_down(tmp_path, warehouse_service):
    """`ccab loader --exit-when-idle` and `ccab sim --to-kafka` used to hang (and print a
    librdkafka FAIL line per retry): now one line each, exit 1, within the check's timeout."""
    env = {**os.environ, "CCAB_DATA_DIR": str(tmp_path / "data"), "CCAB_CLICKHOUSE_URL": f"{warehouse_service}/t_kafka_down",
           "CCAB_KAFKA_BROKERS": f"127.0.0.1:{_closed_port()}"}
    for argv in (["loader", "--exit-when-idle", "5", "--metrics-port", "0"],
                 ["sim", str(SCENARIOS / "tiny.yaml"), "--out", str(tmp_path / "sim"), "--to-kafka"]):
        p = subprocess.run([sys.executable, "-m", "ccab.cli", *argv], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 1, p.stderr
        assert "FAIL" not in p.stderr and "Traceback" not in p.stderr
        assert p.stderr.strip().splitlines()[-1].startswith(f"ccab {argv[0]}: Kafka is unreachable"), p.stderr


def test_data_dir_does_not_follow_the_current_directory(tmp_path, monkeypatch):
    """Run from another directory, ccab uses the checkout's .ccab instead of creating a new one."""
    from ccab.base.config import REPO_ROOT, settings

    monkeypatch.delenv("CCAB_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert settings().data_dir == REPO_ROOT / ".ccab"
