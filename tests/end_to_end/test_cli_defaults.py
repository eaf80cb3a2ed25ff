"""Option defaults from the environment and a TOML configuration file: flag > environment >
file (command table > top level) > built-in default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streams.cli.defaults import ConfigError, apply, load_config


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--slot-ms", type=int, default=1000)
    p.add_argument("--mechanism", choices=["pbd", "pba"], default="pbd")
    p.add_argument("--reset-local-state", action="store_true")
    p.add_argument("--no-ssl-check-hostname", dest="ssl_check_hostname", action="store_false")
    p.add_argument("--cells", type=int, nargs="+", default=[3])
    return p


def test_precedence_flag_environment_file_default(tmp_path: Path):
    path = tmp_path / "pwevent.toml"
    path.write_text('slot-ms = 5000\nmechanism = "pba"\n[worker]\nslot_ms = 7000\n')
    config = load_config(path)
    p = parser()
    apply(p, "worker", config, {})
    assert (p.parse_args([]).slot_ms, p.parse_args([]).mechanism) == (7000, "pba")
    p = parser()
    apply(p, "plan", config, {})
    assert p.parse_args([]).slot_ms == 5000  # only the top level applies to other commands
    p = parser()
    apply(p, "worker", config, {"PWEVENT_SLOT_MS": "9000"})
    assert p.parse_args([]).slot_ms == 9000
    assert p.parse_args(["--slot-ms", "11"]).slot_ms == 11


def test_booleans_and_lists():
    p = parser()
    apply(p, "worker", {"ssl-check-hostname": False, "cells": [2, 4]},
          {"PWEVENT_RESET_LOCAL_STATE": "true"})
    args = p.parse_args([])
    assert (args.ssl_check_hostname, args.cells, args.reset_local_state) == (False, [2, 4], True)
    p = parser()
    apply(p, "worker", {"no-ssl-check-hostname": True}, {"PWEVENT_CELLS": "5 6"})
    args = p.parse_args([])
    assert (args.ssl_check_hostname, args.cells) == (False, [5, 6])


@pytest.mark.parametrize(("config", "environ", "message"), [
    ({"mechanism": "xyz"}, {}, "--mechanism must be one of pbd, pba"),
    ({}, {"PWEVENT_SLOT_MS": "soon"}, "PWEVENT_SLOT_MS: --slot-ms 'soon'"),
    ({"reset-local-state": "maybe"}, {}, "takes true or false"),
    ({"worker": {"slot-size": 3}}, {}, r"\[worker\] has unknown options: slot-size"),
])
def test_bad_values_are_one_line(config: dict, environ: dict, message: str):
    with pytest.raises(ConfigError, match=message) as info:
        apply(parser(), "worker", config, environ)
    assert "\n" not in str(info.value)


def test_unreadable_files_are_one_line(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read the configuration file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("slot-ms = = 3\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(bad)


def test_the_command_line_takes_a_config_file_and_the_environment(tmp_path: Path, capsys,
                                                                  monkeypatch):
    """``pwevent --config FILE topics create`` on the embedded broker: the prefix comes from
    the command's table, the partition count from the environment; inconsistent connection
    settings are one line and status 2."""
    from local_kafka.embedded import EmbeddedBroker
    from streams.cli.main import main

    path = tmp_path / "pwevent.toml"
    path.write_text('prefix = "top"\n[topics]\nprefix = "fromfile"\n')
    monkeypatch.setenv("PWEVENT_PARTITIONS", "3")
    with EmbeddedBroker() as broker:
        assert main(["--config", str(path), "topics", "create", "--broker",
                     broker.bootstrap]) == 0
    out = capsys.readouterr().out
    assert "fromfile.reports: 3 partitions (created)" in out
    monkeypatch.setenv("PWEVENT_SECURITY_PROTOCOL", "SASL_SSL")
    assert main(["--config", str(path), "topics", "create", "--broker", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pwevent topics: error: --security-protocol SASL_SSL needs --sasl-username "
                   "and --sasl-password (or PWEVENT_SASL_USERNAME and PWEVENT_SASL_PASSWORD)"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[topics]\npartitons = 3\n')
    assert main(["--config", str(bad), "topics", "create"]) == 2
    assert "has unknown options: partitons" in capsys.readouterr().err
