"""``pwevent plan``: its JSON interface, its table, and its errors on bad files."""

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.cli.main import main


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "req.csv"
    path.write_text(text)
    return path


def test_json_lines_exact_shape(tmp_path, capsys):
    req = write(tmp_path, "user,w,E\nu1,4,1.2\nu2,2,0.9\nu3,3,1.5\n")
    status = main(["plan", "--mechanism", "pba", "--requirements", str(req),
                   "--schedule", "10111", "--json"])
    assert status == 0
    lines = capsys.readouterr().out.strip().splitlines()
    recs = [json.loads(line) for line in lines]
    assert [r["slot"] for r in recs] == [1, 2, 3, 4, 5]
    assert set(recs[0]) == {"slot", "nullified", "published", "eps1", "eps2"}
    assert recs[3]["nullified"] is True and recs[3]["published"] is False
    assert recs[2]["eps2"] == pytest.approx({"u1": 0.3, "u2": 0.45, "u3": 0.5})
    assert recs[1]["eps2"] == {"u1": 0.0, "u2": 0.0, "u3": 0.0}


def test_adaptive_ledger_names_the_rule_of_each_budget(tmp_path, capsys):
    """pbad's records add which rule set each user's budget; the budgets are those of
    docs/design.md ("The adaptive ledger") and no window spends more than E/2 on eps2."""
    req = write(tmp_path, "user,w,E\nu1,4,1\nu2,8,2\n")
    assert main(["plan", "--mechanism", "pbad", "--requirements", str(req),
                 "--schedule", "1001001", "--json"]) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert set(recs[0]) == {"slot", "nullified", "published", "eps1", "eps2", "rule"}
    assert [r["eps2"]["u1"] for r in recs] == [0.25, 0, 0, 0.25, 0, 0, 0.25]
    assert [r["eps2"]["u2"] for r in recs] == [0.5, 0, 0, 0.375, 0, 0, 0.125]
    assert [r["rule"]["u2"] for r in recs][:4] == ["distribution"] * 3 + ["absorption"]
    assert recs[2]["rule"] == {"u1": "absorption", "u2": "distribution"}
    assert not any(r["nullified"] for r in recs)
    assert sum(r["eps2"]["u2"] for r in recs) == 1.0  # all of E/2 within its window of 8


def test_table_output(tmp_path, capsys):
    req = write(tmp_path, "user,w,E\nu1,4,1\n")
    assert main(["plan", "--mechanism", "pbd", "--requirements", str(req),
                 "--schedule", "10"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["slot", "decision"]
    assert out[1].split()[:3] == ["1", "published", "u1=0.125+0.25"]
    assert out[2].split()[:3] == ["2", "approximated", "u1=0.125+0"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("user,w\nu1,4\n", "req.csv:1: missing column 'E'"),
        ("user,w,E\nu1,0,1\n", "req.csv:2: field w=0 must be >= 1"),
        ("user,w,E\nu1,4,1\nu2,4,0\n", "req.csv:3: field E=0 must be > 0"),
        ("user,w,E\nu1,4,-2\n", "req.csv:2: field E=-2 must be > 0"),
        ("user,w,E\nu1,4,nan\n", "req.csv:2: field E='nan' is not finite"),
        ("user,w,E\nu1,4,1\nu1,2,1\n", "req.csv:3: duplicate user 'u1'"),
        ("user,w,E\nu1,x,1\n", "req.csv:2: field w='x' is not a number"),
    ],
)
def test_bad_files_exit_2_with_one_line(tmp_path, capsys, text, message):
    req = write(tmp_path, text)
    status = main(["plan", "--mechanism", "pbd", "--requirements", str(req), "--schedule", "1"])
    err = capsys.readouterr().err
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_bad_schedule_exit_2(tmp_path, capsys):
    req = write(tmp_path, "user,w,E\nu1,4,1\n")
    assert main(["plan", "--mechanism", "pbd", "--requirements", str(req),
                 "--schedule", "10x"]) == 2
    assert "schedule position 3" in capsys.readouterr().err


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "streams.cli", "plan", "--help"],
        capture_output=True, text=True, check=True,
    )
    assert "--schedule" in out.stdout


def test_the_default_says_what_it_chooses_and_why(tmp_path, capsys):
    req = tmp_path / "r.csv"
    # 3 users over 2 cells, w_min = 2 and E_min = 0.5: (3/2) / (sqrt(2) * 2 / 0.5) = 0.265 < 1
    req.write_text("user,w,E\na,4,1.0\nb,2,3.0\nc,10,0.5\n")
    assert main(["plan", "--mechanism", "default", "--requirements", str(req),
                 "--schedule", "10"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith(
        "default configuration: 3 users over 2 cells, per-slot signal-to-noise")
    assert "= 0.2652 < 1: pbad with round" in text.splitlines()[0]
    assert main(["plan", "--mechanism", "pbad", "--requirements", str(req),
                 "--schedule", "10"]) == 0
    assert capsys.readouterr().out == "\n".join(text.splitlines()[1:]) + "\n"
    # one cell and 60 users at (1, 2.0): 60 / (sqrt(2) / 2) = 84.9 >= 1
    req.write_text("user,w,E\n" + "".join(f"u{i},1,2.0\n" for i in range(60)))
    assert main(["plan", "--mechanism", "default", "--requirements", str(req),
                 "--schedule", "1", "--json", "--cells", "1"]) == 0
    rec = orjson.loads(capsys.readouterr().out)
    assert rec["default"] == {"mechanism": "pbu", "postprocess": "kalman_split",
                              "snr": pytest.approx(60 / (2 ** 0.5 / 2))}
    assert rec["eps2"]["u0"] == 2.0 and rec["published"]
