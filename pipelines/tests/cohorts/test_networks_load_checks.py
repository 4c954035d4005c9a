"""`ccab networks load` never changes the networks silently (issue 29): a network listed twice and
one with host bits set are reported, /0 and rows with missing columns are refused, a file whose bad
rows pass 1 % is refused, and so is one that would shrink the dictionary by over 10 % — each
unless --force. Real chdb through the CLI."""

from __future__ import annotations

import ipaddress

import pytest
from ccab import cli
from ccab.base.warehouse import connect
from ccab.cohorts import networks as nw

HEADER = "network,asn,as_name,country,access\n"


def _good(n: int, start: int = 0) -> list[str]:
    """n distinct /24s in 10.0.0.0/8."""
    return [f"{ipaddress.ip_address((10 << 24) + ((start + i) << 8))}/24,{64500 + i % 50},AS-{i % 50},JP,fixed"
            for i in range(n)]


def _write(tmp_path, name: str, rows: list[str]):
    f = tmp_path / name
    f.write_text(HEADER + "".join(r + "\n" for r in rows))
    return f


def _held() -> int:
    wh = connect()
    try:
        return nw.held(wh)
    finally:
        wh.close()


def _lookup(prefix: str):
    wh = connect()
    try:
        return nw.lookup(wh, [prefix])[0]
    finally:
        wh.close()


def test_duplicates_and_host_bits_are_reported(warehouse_env, tmp_path, capsys):
    rows = _good(200) + ["10.0.5.0/24,64999,LATER,US,mobile", "10.5.5.1/24,64998,HOSTBITS,JP,fixed"]
    assert cli.main(["networks", "load", str(_write(tmp_path, "n.csv", rows)), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "warning: 1 network(s) listed more than once, the later row kept (10.0.5.0/24 on lines 7 and 202)" in out
    assert "warning: 1 network(s) with host bits set, loaded as their network (line 203: 10.5.5.1/24 read as " \
           "10.5.5.0/24)" in out
    assert _lookup("10.0.5.0/24")[3:] == (64999, "LATER")


def test_a_slash_zero_and_missing_columns_are_bad_rows(warehouse_env, tmp_path, capsys):
    rows = _good(300) + ["0.0.0.0/0,64496,EVERYTHING,US,fixed", "::/0,64496,EVERYTHING,US,fixed", "10.200.0.0/16,64501"]
    assert cli.main(["networks", "load", str(_write(tmp_path, "n.csv", rows)), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "3 rows skipped" in out and "a /0 would make every unknown client one network" in out, out
    assert "line 304: 2 columns, the header has 5" in out, out
    assert _held() == 300
    assert _lookup("192.0.2.0/24")[1:4] == ("unknown", "", 0)  # no /0 swallowed the unknown clients
    assert _lookup("10.200.1.0/24")[3] == 0  # the short row was not loaded with empty columns
    p = nw.parse("1.0.0.0\t255.255.255.255\t64496\tUS\tALL\n0.0.0.0\t255.255.255.255\t64496\tUS\tALL\n")
    assert p.bad == 1 and "every address" in p.skipped_examples[0]


def test_a_mostly_bad_file_is_refused_unless_forced(warehouse_env, tmp_path, capsys):
    assert cli.main(["networks", "load", str(_write(tmp_path, "good.csv", _good(1000))), "--top", "0"]) == 0
    capsys.readouterr()
    bad = _write(tmp_path, "bad.csv", _good(1, start=5000) + ["not-a-network,1,X,JP,fixed"] * 10_000)
    assert cli.main(["networks", "load", str(bad), "--top", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ccab networks: not loaded: ") and "10,000 of 10,001 rows are bad (100.0%" in err, err
    assert "--force" in err and err.count("\n") == 1
    assert _held() == 1000
    # 1 bad row in 100 is still 1 %: loaded
    ok = _write(tmp_path, "ok.csv", _good(990) + ["10.0.0.1/33,1,X,JP,fixed"] * 10)
    assert cli.main(["networks", "load", str(ok), "--top", "0"]) == 0
    assert _held() == 990
    capsys.readouterr()
    assert cli.main(["networks", "load", str(bad), "--top", "0", "--force"]) == 0
    assert "warning: loaded with --force" in capsys.readouterr().out
    assert _held() == 1


def test_a_shrinking_load_is_refused_unless_forced(warehouse_env, tmp_path, capsys):
    assert cli.main(["networks", "load", str(_write(tmp_path, "all.csv", _good(1000))), "--top", "0"]) == 0
    assert cli.main(["networks", "load", str(_write(tmp_path, "most.csv", _good(900))), "--top", "0"]) == 0
    capsys.readouterr()
    small = _write(tmp_path, "small.csv", _good(100))
    assert cli.main(["networks", "load", str(small), "--top", "0"]) == 2
    err = capsys.readouterr().err
    assert "the file has 100 networks and would replace 900 (-88.9%" in err and "--force" in err, err
    assert _held() == 900
    assert cli.main(["networks", "load", str(small), "--top", "0", "--force"]) == 0
    assert _held() == 100


def test_the_cli_help_states_the_thresholds():
    from ccab.cli import networks as cli_networks
    assert cli_networks.MAX_BAD_SHARE_PCT == f"{nw.MAX_BAD_SHARE:.0%}".replace("%", "%%")
    assert cli_networks.MAX_SHRINK_PCT == f"{nw.MAX_SHRINK:.0%}".replace("%", "%%")
    with pytest.raises(SystemExit):
        cli.main(["networks", "load", "--help"])


def test_status_is_readable_and_json_on_request(warehouse_env, tmp_path, capsys):
    import json

    assert cli.main(["networks", "load", str(_write(tmp_path, "n.csv", _good(10))), "--top", "0"]) == 0
    capsys.readouterr()
    assert cli.main(["networks", "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dictionary: LOADED, 10 networks, updated "), out
    assert "last load:  " in out and "10 networks (10 IPv4, 0 IPv6), 0 rows skipped" in out
    assert "{" not in out
    assert cli.main(["networks", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["last_load"]["networks"] == 10
