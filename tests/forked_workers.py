"""``pwevent`` commands started by forking a process that has already imported them.

A worker started as ``python -m streams.cli worker`` spends about 1.3 s of CPU importing
Faust, aiokafka, numpy and the job before it does anything, and the suite starts about 170 of
them. A fork server (one per test process, started on first use) imports what a worker imports
once; each start forks it. The child is the command as ``python -m streams.cli ARGS`` runs it:
the given arguments, environment and working directory, stdin from ``/dev/null``, stdout and
stderr appended to a log file, default signal dispositions, and an ordinary interpreter exit
(``atexit`` handlers, threads joined) with the command's status. Only its parent differs: the
server reaps it and reports its status, and :class:`ForkedProcess` gives the test the part of
:class:`subprocess.Popen` the tests use (``pid``, ``poll``, ``wait``, ``send_signal``,
``terminate``, ``kill``, ``returncode``). The other commands the tests run as a user would
(``replay``, ``releases``, ``group``, ``topics``, ``audit``) are forked the same way by
:func:`run_command`, which captures stdout and stderr apart as ``subprocess.run`` does.

A forked worker joins its group about a second sooner than any real one can, its imports
done. Where the pace of a start is part of what a test checks (workers killed and started
again, :class:`jobkit.Workers`), the forked child first waits :data:`PROGRAM_LOAD_S`, the time
a fresh worker spends importing here, idle: on the embedded broker, a worker started again a
fraction of a second after its SIGKILL rejoined as the group's leader in the same generation
and took partitions another member still held, and the job stalled (``docs/performance.md``).

The server kills the children it still has and exits when its test process goes away (its
stdin closes), so a test that dies leaves no worker behind. ``TESTS_FRESH_WORKERS=1`` starts
every command as a fresh interpreter instead. The commands' own subprocesses (``pwevent demo``
starting its worker), the README's commands and the tests of a start itself
(``test_startup.py``, ``--version``) still start fresh interpreters.

Run as a script, this module is the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a worker started as a program spends importing before it runs, on these machines
#: (1.33 s of CPU): what a forked start waits where a test needs a real start's pace.
PROGRAM_LOAD_S = 1.3
#: What the server imports before it forks: everything a running worker has imported, and what
#: the other commands the tests run import.
PRELOAD = ("streams.cli.main", "streams.cli.worker", "streams.job.worker.faust_job",
           "streams.job.worker.ingest", "streams.job.worker.preflight",
           "streams.job.worker.partition_runner", "streams.job.worker.coordinator_runner",
           "streams.job.worker.local_state", "streams.job.worker.data_dir",
           "streams.job.operations.json_logs", "streams.cli.defaults", "faust",
           "faust.app.base", "faust.stores.rocksdb", "faust.web.drivers", "faust.models.record",
           "faust.sensors.monitor", "faust.assignor", "faust.app.router", "faust.topics",
           "faust.tables.sets", "faust.fixups.django", "numpy.ma", "yaml",
           "cryptography.hazmat.primitives.ciphers", "streams.cli.replay",
           "streams.cli.replay_ldp", "streams.cli.replay_rounds", "streams.cli.releases",
           "streams.cli.group", "streams.cli.audit", "streams.cli.topics", "streams.job.pipeline")


# -- the test process's side ------------------------------------------------------------------

class ForkedProcess:
    """A command the fork server started: the :class:`subprocess.Popen` surface the tests use."""

    def __init__(self, server: ForkServer, pid: int, args: Sequence[str],
                 captured: tuple[Path, Path] | None = None) -> None:
        self._server, self.pid, self.args = server, pid, list(args)
        self.returncode: int | None = None
        self._captured = captured  # the files standing for stdout and stderr pipes
        self._output: tuple[bytes, bytes] | None = None

    def poll(self) -> int | None:
        """The exit status (``-N`` for signal N) once the process has ended, else ``None``."""
        if self.returncode is None:
            self.returncode = self._server.status(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to end; :class:`subprocess.TimeoutExpired` after ``timeout``."""
        if self.returncode is None:
            code = self._server.status(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.returncode = code
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[bytes | None, bytes | None]:
        """Wait, then the captured stdout and stderr (``None``, ``None`` when the output went to
        a log file), as :meth:`subprocess.Popen.communicate` with both piped gives them."""
        self.wait(timeout)
        if self._captured is None:
            return None, None
        if self._output is None:
            out, err = self._captured
            self._output = (out.read_bytes(), err.read_bytes())
            for path in self._captured:
                path.unlink(missing_ok=True)
            out.parent.rmdir()
        return self._output

    def send_signal(self, sig: int) -> None:
        """Signal the process, unless it has been reaped (its pid may be someone else's)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # ended, its end not reported yet
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The test process's connection to its fork server (started on first use)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, cwd=ROOT)
        self.lock = threading.Lock()
        self.changed = threading.Condition()
        self.started: list[int | str] = []
        self.exited: dict[int, int] = {}
        self.reader = threading.Thread(target=self._read, name="fork-server", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self.changed:
                if "started" in message:
                    self.started.append(message["started"])
                else:
                    self.exited[message["pid"]] = message["code"]
                self.changed.notify_all()
        with self.changed:
            self.started.append("the fork server has exited")
            self.changed.notify_all()

    def spawn(self, args: Sequence[str], env: Mapping[str, str], log: Path,
              cwd: Path | None = None, load_s: float = 0.0,
              err_log: Path | None = None) -> ForkedProcess:
        """``python -m streams.cli *args`` with ``env``, stdout appended to ``log`` and stderr
        to ``err_log`` (default: ``log``), run after ``load_s`` seconds."""
        for path in (log, err_log or log):
            path.open("ab").close()  # there when this returns, as Popen opens it before it does
        request = {"args": list(args), "env": dict(env), "log": str(log),
                   "err_log": str(err_log or log), "cwd": str(cwd or Path.cwd()),
                   "load_s": load_s}
        assert self.proc.stdin is not None
        with self.lock, self.changed:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            if not self.changed.wait_for(lambda: self.started, 30):
                raise RuntimeError("the fork server did not answer in 30 s")
            pid = self.started.pop(0)
        if isinstance(pid, str):
            raise RuntimeError(pid)
        return ForkedProcess(self, pid, [sys.executable, "-m", "streams.cli", *args],
                             None if err_log is None else (log, err_log))

    def status(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit status, waiting up to ``timeout`` seconds (``None``: for ever)."""
        with self.changed:
            self.changed.wait_for(lambda: pid in self.exited or not self.reader.is_alive(),
                                  timeout)
            if pid not in self.exited and not self.reader.is_alive():
                raise RuntimeError("the fork server has exited")
            return self.exited.get(pid)


#: A worker or command the tests started: forked, or a fresh interpreter.
Process = ForkedProcess | subprocess.Popen

_server: ForkServer | None = None
_captures: tempfile.TemporaryDirectory | None = None  # where captured output is written
_server_lock = threading.Lock()


def _fork_server() -> ForkServer:
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            _server = ForkServer()
        return _server


def _fresh() -> bool:
    return os.environ.get("TESTS_FRESH_WORKERS") == "1"


def start_command(args: Sequence[str], env: Mapping[str, str], log: Path,
                  load_s: float = 0.0) -> Process:
    """``pwevent *args`` (``python -m streams.cli``) with ``env``, stdout and stderr appended
    to ``log``: forked from the server (the child idle for ``load_s`` seconds first, as a
    program loads), or a fresh interpreter under ``TESTS_FRESH_WORKERS=1``."""
    if _fresh():
        with log.open("ab") as out:
            return subprocess.Popen([sys.executable, "-m", "streams.cli", *args], stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(env))
    return _fork_server().spawn(args, env, log, load_s=load_s)


def start_captured(args: Sequence[str], env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> Process:
    """``pwevent *args`` with its stdout and stderr captured, as
    ``Popen(..., stdout=PIPE, stderr=PIPE)``: :meth:`ForkedProcess.communicate` returns them
    as bytes once it has ended (forked, or a fresh interpreter under ``TESTS_FRESH_WORKERS=1``)."""
    env = dict(os.environ if env is None else env)
    if _fresh():
        return subprocess.Popen([sys.executable, "-m", "streams.cli", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    global _captures
    with _server_lock:
        if _captures is None:  # removed when the test process exits
            _captures = tempfile.TemporaryDirectory(prefix="pwevent-tests-output-")
    where = Path(tempfile.mkdtemp(dir=_captures.name))
    return _fork_server().spawn(args, env, where / "stdout", cwd=cwd,
                                err_log=where / "stderr")


def run_command(args: Sequence[str], env: Mapping[str, str] | None = None,
                timeout: float | None = None, cwd: Path | None = None,
                text: bool = False) -> subprocess.CompletedProcess:
    """``pwevent *args`` run to its end, as ``subprocess.run(..., capture_output=True)`` runs
    it: its status and output (``str`` with ``text``), :class:`subprocess.TimeoutExpired`
    (the command killed) after ``timeout`` seconds."""
    proc = start_captured(args, env, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert out is not None and err is not None
    if text:
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(),
                                           err.decode())
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- the server -------------------------------------------------------------------------------

def _serve() -> dict | None:
    """Fork a child per request and report each child's exit; in a child, return its request."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: set[int] = set()
    pending = b""

    def answer(message: dict) -> None:
        answers.write(json.dumps(message).encode() + b"\n")

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            answer({"pid": pid, "code": os.waitstatus_to_exitcode(status)})

    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                os.read(wake_r, 4096)
                reap()
                continue
            chunk = requests.read(65536)
            if not chunk:  # the test process is gone: so are its workers
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                while children:
                    pid, _ = os.waitpid(-1, 0)
                    children.discard(pid)
                return None
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for fd in (wake_r, wake_w, null):
                        os.close(fd)
                    answers.close()
                    requests.close()
                    return request
                children.add(pid)
                answer({"started": pid})
        reap()


def _run(request: dict) -> int:
    """The command of ``request``, as ``python -m streams.cli`` runs it."""
    for fd, path in ((1, request["log"]), (2, request["err_log"])):
        log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, fd)
        os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    time.sleep(request["load_s"])
    sys.argv = [str(ROOT / "streams" / "cli" / "__main__.py"), *request["args"]]
    from streams.cli.main import main

    return main(request["args"])


if __name__ == "__main__":
    sys.path[0] = str(ROOT)  # as ``python -m streams.cli`` run from the repository has it
    child = _serve()
    if child is not None:
        sys.exit(_run(child))
