"""The shared vectors file is what the Python implementation computes now."""

from __future__ import annotations

from pathlib import Path

from streams.ldp_client import vectors


def test_the_vectors_file_is_current(capsys) -> None:
    assert vectors.main(["--check"]) == 0, capsys.readouterr().out


def test_a_changed_vector_is_caught(tmp_path: Path) -> None:
    changed = tmp_path / "v.json"
    changed.write_text(vectors.PATH.read_text().replace('\\"bits\\":\\"', '\\"bits\\":\\"0', 1))
    assert vectors.main(["--check", "--path", str(changed)]) == 1


def test_the_vectors_cover_every_protocol_and_refusal() -> None:
    built = vectors.build()
    protocols = {c["config"]["protocol"] for c in built["clients"]}
    refusals = {s.get("refused") for c in built["clients"] for s in c["steps"]}
    oracles = {'"oracle":"grr"' in (s.get("report") or "") for c in built["clients"]
               for s in c["steps"]}
    assert protocols == {"lbu", "lsp", "lpu", "plbu"}
    assert {"over_budget", "not_after_last"} <= refusals
    assert oracles == {True, False}
