"""A real schema registry for the Avro source tests and benchmark: Apicurio Registry, in memory.

``./setup.sh test`` unpacks the pinned distribution (``deploy/schema-registry/pom.xml``) into
``.schema-registry/`` of the checkout (or ``$PWEVENT_SCHEMA_REGISTRY_HOME``).
:class:`SchemaRegistryServer` starts it on a free loopback port, waits until its
Confluent-compatible API (``/apis/ccompat/v7``) answers, and stops exactly the JVM it started, by
its pid: on :meth:`~SchemaRegistryServer.stop`, on leaving its ``with`` block, when it is garbage
collected and when the interpreter exits, so a failing test leaves no JVM behind. Without the
distribution it raises one line naming ``./setup.sh test``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType
from typing import Any

from local_kafka.apache import java
from local_kafka.embedded import free_port

__all__ = ["SchemaRegistryServer", "registry_home", "wire"]

_ROOT = Path(__file__).resolve().parents[1]
_POM = _ROOT / "deploy" / "schema-registry" / "pom.xml"
_CONTENT = "application/vnd.schemaregistry.v1+json"


def registry_version() -> str:
    """The pinned Apicurio Registry version (``deploy/schema-registry/pom.xml``)."""
    found = re.search(r"<apicurio.version>(.*?)</apicurio.version>", _POM.read_text())
    assert found is not None, f"{_POM} pins no apicurio.version"
    return found.group(1)


def registry_home() -> Path:
    """The unpacked distribution's folder; raises ``RuntimeError`` naming ``./setup.sh test``
    when its runner jar is not there."""
    home = Path(os.environ.get("PWEVENT_SCHEMA_REGISTRY_HOME") or _ROOT / ".schema-registry")
    if not (home / _runner()).is_file():
        raise RuntimeError(f"Apicurio Registry {registry_version()} is not installed in {home}: "
                           "run ./setup.sh test (it fetches it with Maven)")
    return home


def _runner() -> str:
    return f"apicurio-registry-app-{registry_version()}-runner.jar"


def wire(schema_id: int, body: bytes) -> bytes:
    """A record value in the Confluent wire format."""
    return b"\0" + schema_id.to_bytes(4, "big") + body


def _kill(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


class SchemaRegistryServer:
    """One Apicurio Registry JVM on ``127.0.0.1:port`` with in-memory storage (module doc)."""

    def __init__(self, heap_mb: int = 256) -> None:
        self.home = registry_home()
        self.java = java()
        self.heap_mb = heap_mb
        self.port = free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="schema-registry-")
        self.log = Path(self._dir.name) / "registry.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._finalizer = weakref.finalize(self, _kill, None)
        atexit.register(self.stop)

    @property
    def url(self) -> str:
        """The base URL of the Confluent-compatible API (what ``--schema-registry`` takes)."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def start(self, timeout: float = 120.0) -> SchemaRegistryServer:
        """Start the JVM (again, on the same port, with empty storage) and wait until the API
        answers; raises ``RuntimeError`` with the log's tail when it does not."""
        if self.pid is not None:
            return self
        # C1 only: the C2 compiler's start-up work never pays back in a test's lifetime (the
        # JVM's CPU until it answers: 6.2 s -> 3.1 s)
        cmd = [self.java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
               "-Dquarkus.log.console.color=false", "-jar", str(self.home / _runner())]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=self._dir.name, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _kill, self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                self.request("GET", "/subjects")
                return self
            except OSError:
                time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"the schema registry did not answer on {self.url}:\n{tail}")

    def stop(self) -> None:
        """Stop the JVM by its pid (SIGTERM, then SIGKILL after 20 s)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            _kill(proc)

    def close(self) -> None:
        """Stop and remove the log folder."""
        self.stop()
        atexit.unregister(self.stop)
        self._dir.cleanup()

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- the API ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call of the Confluent-compatible API; the answer as parsed JSON."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": _CONTENT, "Accept": _CONTENT})
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read())

    def register(self, subject: str, schema: dict[str, Any] | str,
                 references: list[dict[str, Any]] | None = None) -> int:
        """Register an Avro schema under ``subject``; its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body: dict[str, Any] = {"schema": text}
        if references:
            body["references"] = references
        return int(self.request("POST", f"/subjects/{subject}/versions", body)["id"])
