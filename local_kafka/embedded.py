"""An embedded Kafka-protocol broker (noida-db) for tests, demos and benchmarks.

The broker runs as a child process bound to a free loopback port with a private temporary data
directory. It is stopped by its pid: SIGTERM first, SIGKILL after a timeout. The binary prints a
"weak version `GLIBC_2.39' not found" line on some systems and then runs normally; that line is
filtered from diagnostics and never treated as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import weakref
from importlib import resources
from pathlib import Path
from types import TracebackType

from aiokafka.admin import AIOKafkaAdminClient

__all__ = ["BrokerError", "EmbeddedBroker", "broker_binary", "free_port"]

_HARMLESS_MARKERS = ("GLIBC_2.39", "weak version")


class BrokerError(RuntimeError):
    """The embedded broker could not be started or did not answer."""


def broker_binary() -> Path:
    """Return the path of the noida-db executable shipped inside the ``noida_db`` package.

    The package's console script is a wrapper that spawns the binary as a grandchild, which could
    not be stopped by the wrapper's pid; the binary is therefore run directly.
    """
    try:
        path = Path(str(resources.files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError as exc:  # the demo extra is not installed
        raise BrokerError(
            "the embedded broker needs the demo extra: pip install 'pwevent[demo]'"
        ) from exc
    if not path.is_file():
        raise BrokerError(f"noida-db binary not found at {path}")
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _meaningful_lines(text: str) -> list[str]:
    """Log lines without the harmless loader warning."""
    return [
        line
        for line in text.splitlines()
        if line.strip() and not all(m in line for m in _HARMLESS_MARKERS)
    ]


async def _probe_kafka(bootstrap: str, timeout: float) -> list[str]:
    """Connect with the admin client and fetch cluster metadata; return the topic names."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=max(1000, int(timeout * 1000))
    )
    try:
        await asyncio.wait_for(admin.start(), timeout)
        return await asyncio.wait_for(admin.list_topics(), timeout)
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def _run_coroutine_in_thread(coro_factory, timeout: float):  # type: ignore[no-untyped-def]
    """Run ``coro_factory()`` on a private event loop in a helper thread.

    This works whether or not the caller already runs an event loop.
    """
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coro_factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="broker-probe", daemon=True)
    thread.start()
    thread.join(timeout + 5.0)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    if "result" not in box:
        raise TimeoutError("probe did not finish")
    return box["result"]


def _stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``proc`` by pid, then kill it if it outlives ``timeout`` seconds."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout)


class EmbeddedBroker:
    """A noida-db Kafka broker on ``127.0.0.1`` with a temporary data directory.

    Use as a (sync or async) context manager or call :meth:`start` and :meth:`stop`. After start,
    :attr:`bootstrap` is ``"127.0.0.1:PORT"`` and :attr:`pid` the broker's process id.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        startup_timeout: float = 20.0,
        stop_timeout: float = 10.0,
    ) -> None:
        """Configure the broker; ``port=None`` picks a free loopback port at start."""
        self._requested_port = port
        self.port: int | None = None
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._log_file: object | None = None
        self._finalizer: weakref.finalize | None = None

    # -- properties ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The bootstrap address, ``"127.0.0.1:PORT"``."""
        if self.port is None:
            raise BrokerError("broker not started")
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the running broker, or ``None``."""
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> Path | None:
        """The broker's data directory while it runs."""
        return self._workdir / "data" if self._workdir is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        """The broker's output so far, without the harmless loader warning."""
        if self._workdir is None:
            return ""
        path = self._workdir / "broker.log"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(_meaningful_lines(text))

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, attempts: int = 3) -> EmbeddedBroker:
        """Start the broker and wait until it answers Kafka metadata requests."""
        if self.running:
            return self
        broker_binary()  # a missing demo extra fails at once, not after every attempt
        last_error: Exception | None = None
        for _ in range(attempts if self._requested_port is None else 1):
            try:
                self._start_once()
                return self
            except BrokerError as exc:
                last_error = exc
                self._cleanup()
        raise BrokerError(f"embedded broker did not start: {last_error}")

    def _start_once(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="pwevent-broker-"))
        data_dir = self._workdir / "data"
        data_dir.mkdir()
        self.port = self._requested_port or free_port()
        cmd = [
            str(broker_binary()),
            "start",
            "--only",
            "kafka",
            "--host",
            "127.0.0.1",
            "--kafka-port",
            str(self.port),
            "--data-dir",
            str(data_dir),
        ]
        log = open(self._workdir / "broker.log", "wb")  # noqa: SIM115 - closed in _cleanup
        self._log_file = log
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True
        )
        self._finalizer = weakref.finalize(self, _stop_process, self._proc, self.stop_timeout)
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.port is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"broker exited with code {self._proc.returncode}: {self.log_text()!r}"
                )
            if time.monotonic() > deadline:
                raise BrokerError(f"broker did not answer within {self.startup_timeout}s")
            if self._port_open():
                try:
                    _run_coroutine_in_thread(lambda: _probe_kafka(self.bootstrap, 1.0), 1.0)
                except Exception:  # noqa: BLE001 - retried until the deadline
                    pass
                else:
                    # the answer must come from our process, not from another server that
                    # already held the port (in which case ours exits at once)
                    time.sleep(0.05)
                    if self._proc.poll() is None:
                        return
            time.sleep(0.05)

    def _port_open(self) -> bool:
        assert self.port is not None
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        """Stop the broker by pid (SIGTERM, then SIGKILL) and remove its data directory."""
        self._cleanup()

    def _cleanup(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_process(proc, self.stop_timeout)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None
        if self._requested_port is None:
            self.port = None

    # -- context managers ---------------------------------------------------------------------

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EmbeddedBroker:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def __repr__(self) -> str:
        state = f"{self.bootstrap} pid={self.pid}" if self.running else "stopped"
        return f"<EmbeddedBroker {state}>"
