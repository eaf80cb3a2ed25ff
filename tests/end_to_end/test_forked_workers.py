"""The tests' fork server runs a command as a fresh ``python -m streams.cli`` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forked_workers import ForkedProcess, start_command

from local_kafka.embedded import free_port

TESTS = Path(__file__).resolve().parent.parent


def run_both(args: list[str], env: dict[str, str], tmp_path: Path) -> list[tuple[int, str]]:
    """``args`` forked and as a fresh interpreter: each one's status and log."""
    out = []
    for fresh in ("0", "1"):
        log = tmp_path / f"fresh-{fresh}.log"
        os.environ["TESTS_FRESH_WORKERS"] = fresh
        try:
            proc = start_command(args, env, log)
        finally:
            del os.environ["TESTS_FRESH_WORKERS"]
        assert isinstance(proc, ForkedProcess) == (fresh == "0")
        out.append((proc.wait(60), log.read_text()))
    return out


def test_a_forked_command_sees_its_arguments_environment_and_directory(tmp_path, monkeypatch):
    """A configuration file named by a relative path in the environment, and a value in it
    that the worker refuses: the same one-line error and status, forked or fresh."""
    (tmp_path / "pwevent.toml").write_text('[worker]\nslot-ms = "soon"\n')
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PWEVENT_CONFIG="pwevent.toml")
    forked, fresh = run_both(["worker", "--prefix", "x"], env, tmp_path)
    assert forked == fresh
    code, log = forked
    assert code == 2 and log.startswith("pwevent worker: error:") and "pwevent.toml" in log, log


def test_a_signal_ends_a_forked_worker_and_its_status_says_so(tmp_path):
    env = dict(os.environ, PWEVENT_SECRET="s")
    proc = start_command(["worker", "--broker", f"127.0.0.1:{free_port()}", "--prefix", "x",
                          "--data-dir", str(tmp_path / "data")], env, tmp_path / "w.log")
    assert isinstance(proc, ForkedProcess)
    assert (tmp_path / "w.log").exists()  # as Popen has it: created before the start returns
    time.sleep(1)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.kill()
    assert proc.wait(10) == -signal.SIGKILL
    proc.kill()  # reaped: signalling it again does nothing
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)


def test_workers_go_with_the_test_process_that_started_them(tmp_path):
    """A test process killed outright: its fork server kills the workers it forked."""
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from forked_workers import start_command\n"
        f"p = start_command(['worker', '--broker', '127.0.0.1:{free_port()}', '--prefix', 'x',"
        f" '--data-dir', {str(tmp_path / 'data')!r}], dict(os.environ, PWEVENT_SECRET='s'),"
        f" Path({str(tmp_path / 'w.log')!r}))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n")
    test = subprocess.Popen([sys.executable, "-c", script], cwd=TESTS, stdout=subprocess.PIPE,
                            env=dict(os.environ, TESTS_FRESH_WORKERS="0"))
    try:
        assert test.stdout is not None
        worker = int(test.stdout.readline())
        os.kill(worker, 0)  # running
        test.kill()
        test.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError("the worker outlived the test process that started it")
    finally:
        if test.poll() is None:
            test.kill()
            test.wait()
