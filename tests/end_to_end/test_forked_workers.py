"""The tests' fork server runs a command as a fresh ``python -m streams.cli`` would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forked_workers import ForkedProcess, run_command, start_captured, start_command

from local_kafka.embedded import free_port

TESTS = Path(__file__).resolve().parent.parent


def run_both(args: list[str], env: dict[str, str], tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """``args`` forked and as a fresh interpreter: each one's status and log."""
    out = []
    for fresh in ("0", "1"):
        log = tmp_path / f"fresh-{fresh}.log"
        with monkeypatch.context() as m:
            m.setenv("TESTS_FRESH_WORKERS", fresh)
            proc = start_command(args, env, log)
        assert isinstance(proc, ForkedProcess) == (fresh == "0")
        out.append((proc.wait(60), log.read_text()))
    return out


def test_a_forked_command_sees_its_arguments_environment_and_directory(tmp_path, monkeypatch):
    """A configuration file named by a relative path in the environment, and a value in it
    that the worker refuses: the same one-line error and status, forked or fresh."""
    (tmp_path / "pwevent.toml").write_text('[worker]\nslot-ms = "soon"\n')
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PWEVENT_CONFIG="pwevent.toml")
    forked, fresh = run_both(["worker", "--prefix", "x"], env, tmp_path, monkeypatch)
    assert forked == fresh
    code, log = forked
    assert code == 2 and log.startswith("pwevent worker: error:") and "pwevent.toml" in log, log


def test_a_forked_run_captures_what_a_fresh_one_captures(monkeypatch):
    """stdout and stderr apart, as bytes or text, and the status: the same as
    ``subprocess.run(..., capture_output=True)`` of a fresh interpreter gives."""
    args = ["replay", "--in-process", "--secret", "x", "--nonce", "0a1b", "--dataset", "sin",
            "--users", "30", "--slots", "4"]
    forked = run_command(args, timeout=60)
    fresh = subprocess.run([sys.executable, "-m", "streams.cli", *args], capture_output=True,
                           timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == 0 and len(forked.stdout.splitlines()) == 4
    assert forked.stderr == b"4 releases, 0 records rejected\n"
    refused = run_command(["replay", "--slots", "many"], timeout=60, text=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--slots: invalid" in refused.stderr, refused.stderr
    with monkeypatch.context() as m:
        m.setenv("TESTS_FRESH_WORKERS", "1")
        again = run_command(["replay", "--slots", "many"], timeout=60, text=True)
    assert (again.returncode, again.stdout, again.stderr) == \
        (refused.returncode, refused.stdout, refused.stderr)


def test_a_forked_command_reads_the_environment_it_is_given():
    """The server imported the commands before this environment existed: a default read from
    the environment is read when the command runs (``pwevent group``'s ``PWEVENT_BROKER``)."""
    down = f"127.0.0.1:{free_port()}"
    done = run_command(["group", "describe", "--timeout", "1"],
                       dict(os.environ, PWEVENT_BROKER=down), timeout=60, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith(f"pwevent group: error: cannot reach the broker at {down}:"), \
        done.stderr


def test_a_forked_run_past_its_timeout_is_killed(tmp_path):
    proc = start_captured(["worker", "--broker", f"127.0.0.1:{free_port()}", "--prefix", "x",
                           "--data-dir", str(tmp_path / "data")],
                          dict(os.environ, PWEVENT_SECRET="s"))
    assert isinstance(proc, ForkedProcess)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=0.5)
    proc.kill()
    out, err = proc.communicate(10)
    assert proc.returncode == -signal.SIGKILL and isinstance(out, bytes)
    with pytest.raises(subprocess.TimeoutExpired):
        run_command(["worker", "--broker", f"127.0.0.1:{free_port()}", "--prefix", "x",
                     "--data-dir", str(tmp_path / "data2")], dict(os.environ, PWEVENT_SECRET="s"),
                    timeout=0.5)


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
