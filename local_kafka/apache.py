"""Apache Kafka on this machine: 1 or 3 KRaft nodes started from the jars `./setup.sh test` fetches.

``./setup.sh test`` fetches one pinned Apache Kafka broker with Maven (``deploy/apache-kafka/
pom.xml``) into ``.kafka/libs/`` of the checkout (or ``$PWEVENT_KAFKA_LIBS``). :class:`ApacheKafka`
formats KRaft storage and starts combined broker/controller nodes on free loopback ports, waits
until every node serves, and stops exactly the JVMs it started, by their pids: on :meth:`stop`,
on leaving its ``with`` block, when it is garbage collected and when the interpreter exits, so a
failing test leaves no JVM behind. Single nodes can be killed (SIGKILL), restarted and have their
log directory wiped, for the failover tests.

With ``security=Security(...)`` the client listener is SASL_SSL with SCRAM-SHA-512 (credentials
created when storage is formatted), TLS from a self-signed certificate made with the JDK's
keytool, and Kafka's StandardAuthorizer with ACLs, the administrator a super user.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from local_kafka.embedded import BrokerError, free_port

__all__ = ["KAFKA_VERSION", "ApacheKafka", "Security", "kafka_libs", "missing_libs_message"]

KAFKA_VERSION = "4.1.1"
_ROOT = Path(__file__).resolve().parents[1]
_LIVE: weakref.WeakSet[ApacheKafka] = weakref.WeakSet()


def kafka_libs() -> Path:
    """The folder of Apache Kafka's jars: ``$PWEVENT_KAFKA_LIBS``, else ``.kafka/libs`` of the
    checkout. Raises :class:`BrokerError` with one line naming ``./setup.sh test`` when the broker's
    jar is not there."""
    libs = Path(os.environ.get("PWEVENT_KAFKA_LIBS") or _ROOT / ".kafka" / "libs")
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise BrokerError(missing_libs_message(libs))
    return libs


def missing_libs_message(libs: Path) -> str:
    """The one-line error for missing Kafka jars."""
    return (f"Apache Kafka {KAFKA_VERSION} is not installed in {libs}: run ./setup.sh test "
            "(it fetches the jars with Maven)")


def java() -> str:
    """The ``java`` executable (``$JAVA_HOME/bin/java`` first)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise BrokerError("Apache Kafka needs Java 17 or later on PATH (java not found)")
    return found


@dataclass(frozen=True)
class Security:
    """SASL_SSL with SCRAM-SHA-512 principals and ACLs (the administrator is a super user)."""

    users: dict[str, str] = field(default_factory=dict)  # principal name -> password
    admin: str = "admin"
    admin_password: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_dir(self) -> Path:
        return self.directory / "data"


_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


#: JVM settings for nodes and tools that live seconds to minutes on a loaded 2-core machine: the
#: C1 compiler only (the C2 compiler's work at start-up is most of a node's CPU and never pays
#: back in a test's lifetime) and the serial collector (no GC threads competing for the cores).
#: Measured: a node's CPU until it serves 4.0 s -> 2.2-2.5 s, a storage format 1.3 s -> 0.8-0.9 s
#: (docs/performance.md, "The test suite").
_SHORT_LIVED_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def class_archive(libs: Path) -> Path:
    """The class data archive of Kafka's classes for the jars in ``libs`` (beside them), made by
    :func:`make_class_archive` (``./setup.sh test``). A JVM started with it maps the classes a
    node or a tool loads instead of reading and verifying each from the jars: a node's storage
    format, start and stop took 2.9-3.2 s of CPU without it and 1.6-1.7 s with it
    (docs/performance.md, "The test suite")."""
    return libs.parent / "kafka-classes.jsa"


def jvm_options(libs: Path) -> tuple[str, ...]:
    """The JVM options of nodes and tools: :data:`_SHORT_LIVED_JVM`, and the class archive when
    there is one. An archive the JVM cannot use (other jars, another JVM) is passed over, its
    warning silenced; the classes then load from the jars as without it."""
    archive = class_archive(libs)
    if not archive.is_file():
        return _SHORT_LIVED_JVM
    return (*_SHORT_LIVED_JVM, f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off")


def make_class_archive() -> Path:
    """Write :func:`class_archive` of the fetched jars: the classes a node loads while its storage
    is formatted, it starts, serves and stops (the JVM writes them as it exits)."""
    libs = kafka_libs()
    archive = class_archive(libs)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kafka-archive-") as root:
        cluster = ApacheKafka(1, root=Path(root))  # kept directory: a clean stop, so an exit
        cluster.jvm_options = (*_SHORT_LIVED_JVM, f"-XX:ArchiveClassesAtExit={partial}")
        with cluster:
            pass
    if not partial.is_file():
        raise BrokerError(f"the JVM wrote no class archive at {partial}")
    partial.replace(archive)
    return archive


class ApacheKafka:
    """A local Apache Kafka cluster of ``nodes`` combined KRaft broker/controller nodes."""

    def __init__(self, nodes: int = 1, *, root: Path | None = None,
                 security: Security | None = None, heap_mb: int = 384,
                 config: dict[str, str] | None = None) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.libs = kafka_libs()
        self.java = java()
        self.jvm_options = jvm_options(self.libs)
        self.security = security
        self.heap_mb = heap_mb
        self.extra = dict(config or {})
        self._tmp = None if root is not None else tempfile.TemporaryDirectory(prefix="kafka-")
        self.root = Path(root if root is not None else self._tmp.name)  # type: ignore[union-attr]
        self.cluster_id = _cluster_id()
        self.nodes = [_Node(i + 1, free_port(), free_port(), self.root / f"node{i + 1}")
                      for i in range(nodes)]
        self._formatted: set[int] = set()
        _LIVE.add(self)
        self._finalizer = weakref.finalize(self, _kill_all, [n for n in self.nodes])

    # -- addresses -----------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port`` of every node, comma-separated."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def ca_file(self) -> Path:
        """The PEM certificate clients trust (with ``security``)."""
        return self.root / "tls" / "ca.pem"

    @property
    def running(self) -> bool:
        """Whether any node's JVM runs."""
        return any(n.proc is not None and n.proc.poll() is None for n in self.nodes)

    def pid(self, node_id: int) -> int | None:
        """The pid of a node's JVM while it runs."""
        proc = self._node(node_id).proc
        return proc.pid if proc is not None and proc.poll() is None else None

    # -- life cycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> ApacheKafka:
        """Format storage where needed, start every node and wait until all serve."""
        if self.security is not None:
            self._make_tls()
        for node in self.nodes:
            self._start_node(node)
        self.wait_serving(timeout)
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Stop every node it started: SIGTERM, then SIGKILL after ``timeout``. A cluster in a
        directory of its own, which this deletes, is killed at once: nothing a clean shutdown
        writes is kept, and the nodes of a cluster stopped together wait out ``timeout`` on a
        quorum that is leaving with them."""
        discarded = self._tmp is not None
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    if discarded:
                        node.proc.kill()
                    else:
                        node.proc.terminate()
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        node.proc.kill()
                    node.proc.wait(10)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def detach(self) -> dict[str, object]:
        """Leave the nodes running past this object and this process (no finalizer, no exit
        hook kills them) and return what another process needs to use and stop them: the
        bootstrap address and each running node's pid (:func:`kill_detached`)."""
        self._finalizer.detach()
        _LIVE.discard(self)
        return {"bootstrap": self.bootstrap,
                "pids": [pid for n in self.nodes if (pid := self.pid(n.node_id)) is not None],
                "root": str(self.root)}

    def stop_node(self, node_id: int, timeout: float = 30.0) -> None:
        """Stop one node cleanly (SIGTERM; SIGKILL if it outlives ``timeout``)."""
        node = self._node(node_id)
        if node.proc is None or node.proc.poll() is not None:
            return
        node.proc.terminate()
        try:
            node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(10)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (it does not shut down cleanly)."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(10)

    def restart(self, node_id: int, timeout: float = 90.0) -> None:
        """Start a killed or stopped node again and wait until the cluster serves it."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            raise BrokerError(f"node {node_id} is still running")
        self._start_node(node)
        self.wait_serving(timeout)

    def wipe(self, node_id: int) -> None:
        """Delete a stopped node's log directory (its data and metadata); it is formatted again
        on its next start, with the cluster's id, and replicates everything back."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            raise BrokerError(f"stop node {node_id} before wiping it")
        shutil.rmtree(node.log_dir, ignore_errors=True)
        self._formatted.discard(node_id)

    def wait_serving(self, timeout: float = 90.0) -> None:
        """Wait until every running node answers metadata and the cluster lists all of them."""
        deadline = time.monotonic() + timeout
        running = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        last = ""
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() is not None and node in running:
                    raise BrokerError(f"Kafka node {node.node_id} exited with "
                                      f"{node.proc.returncode}: {self._tail(node)}")
            if not all(_accepts(n.port) for n in running):
                time.sleep(0.2)
                continue
            try:
                seen = asyncio.run(self._brokers(min(5.0, deadline - time.monotonic() + 1)))
                if {n.node_id for n in running} <= seen:
                    return
                last = f"brokers registered: {sorted(seen)}"
            except Exception as exc:  # noqa: BLE001 - not up yet; retried until the deadline
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.3)
        raise BrokerError(f"Apache Kafka did not serve within {timeout:g} s ({last}); "
                          f"{self._tail(running[0]) if running else ''}")

    # -- administration --------------------------------------------------------------------------

    def client_settings(self, user: str | None = None) -> dict[str, object]:
        """``KafkaSettings`` fields for a client of this cluster as ``user`` (the administrator
        by default); PLAINTEXT without ``security``."""
        if self.security is None:
            return {}
        name = user or self.security.admin
        password = (self.security.admin_password if name == self.security.admin
                    else self.security.users[name])
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": name, "sasl_password": password,
                "ssl_cafile": str(self.ca_file)}

    def admin_properties(self) -> Path:
        """A Java client properties file for the administrator (for Kafka's own tools)."""
        path = self.root / "admin.properties"
        lines: list[str] = []
        if self.security is not None:
            sec = self.security
            lines = ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                     f'required username="{sec.admin}" password="{sec.admin_password}";',
                     f"ssl.truststore.location={self.root / 'tls' / 'trust.p12'}",
                     "ssl.truststore.type=PKCS12", f"ssl.truststore.password={_TLS_PASSWORD}"]
        path.write_text("\n".join(lines) + "\n")
        return path

    def tool(self, main_class: str) -> list[str]:
        """The command line that runs one of Kafka's tools (e.g.
        ``org.apache.kafka.tools.AclCommand``) from the fetched jars."""
        return [self.java, "-Xmx256m", *self.jvm_options, "-cp", f"{self.libs}/*",
                f"-Dlog4j2.configurationFile={self._tool_log4j()}", main_class]

    # -- internals -----------------------------------------------------------------------------

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _node(self, node_id: int) -> _Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id}")

    def _properties(self, node: _Node) -> str:
        n = len(self.nodes)
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "CLIENT",
            "listeners": f"CLIENT://127.0.0.1:{node.port},"
                         f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{node.port}",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.log_dir),
            "num.partitions": "1",
            "default.replication.factor": str(min(3, n)),
            "min.insync.replicas": str(min(2, n)),
            "offsets.topic.replication.factor": str(min(3, n)),
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
            "transaction.state.log.num.partitions": "8",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.cleaner.backoff.ms": "1000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "log.cleaner.threads": "1",
        }
        if self.security is not None:
            sec = self.security
            tls = self.root / "tls"
            props.update({
                "listener.security.protocol.map": "CLIENT:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "sasl.mechanism.controller.protocol": "PLAIN",
                "listener.name.client.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{sec.admin}" password="{sec.admin_password}";',
                "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config":
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{_CONTROLLER}" password="{sec.admin_password}" '
                    f'user_{_CONTROLLER}="{sec.admin_password}";',
                "ssl.keystore.location": str(tls / "broker.p12"),
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.password": _TLS_PASSWORD,
                "ssl.key.password": _TLS_PASSWORD,
                "ssl.truststore.location": str(tls / "trust.p12"),
                "ssl.truststore.type": "PKCS12",
                "ssl.truststore.password": _TLS_PASSWORD,
                "ssl.client.auth": "none",
                "authorizer.class.name":
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": f"User:{sec.admin};User:{_CONTROLLER}",
                "allow.everyone.if.no.acl.found": "false",
            })
        props.update(self.extra)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _start_node(self, node: _Node) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        conf = node.directory / "server.properties"
        conf.write_text(self._properties(node))
        log4j = node.directory / "log4j2.properties"
        log4j.write_text(_LOG4J.format(log=node.directory / "server.log"))
        if node.node_id not in self._formatted and not (node.log_dir / "meta.properties").exists():
            self._format(node, conf)
        self._formatted.add(node.node_id)
        out = (node.directory / "stdout.log").open("ab")
        node.proc = subprocess.Popen(
            [self.java, f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", *self.jvm_options,
             "-Djava.awt.headless=true",
             f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{self.libs}/*", "kafka.Kafka",
             str(conf)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        out.close()
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _kill_all, list(self.nodes))

    def _format(self, node: _Node, conf: Path) -> None:
        cmd = self.tool("kafka.tools.StorageTool") + [
            # one token: an id that starts with "-" would otherwise be read as an option
            "format", f"--cluster-id={self.cluster_id}", "-c", str(conf), "--ignore-formatted"]
        if self.security is not None:
            sec = self.security
            for name, password in {sec.admin: sec.admin_password, **sec.users}.items():
                cmd += ["--add-scram",
                        f"SCRAM-SHA-512=[name={name},password={password}]"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BrokerError(f"formatting Kafka node {node.node_id} failed: "
                              f"{(done.stderr or done.stdout).strip()[-2000:]}")

    def _make_tls(self) -> None:
        tls = self.root / "tls"
        if (tls / "ca.pem").exists():
            return
        tls.mkdir(parents=True, exist_ok=True)
        keytool = str(Path(self.java).with_name("keytool"))
        store = tls / "broker.p12"
        subprocess.run([keytool, "-genkeypair", "-alias", "broker", "-keyalg", "RSA",
                        "-keysize", "2048", "-dname", "CN=localhost", "-validity", "7",
                        "-ext", "SAN=IP:127.0.0.1,DNS:localhost", "-keystore", str(store),
                        "-storetype", "PKCS12", "-storepass", _TLS_PASSWORD,
                        "-keypass", _TLS_PASSWORD], check=True, capture_output=True)
        subprocess.run([keytool, "-exportcert", "-alias", "broker", "-keystore", str(store),
                        "-storepass", _TLS_PASSWORD, "-rfc", "-file", str(tls / "ca.pem")],
                       check=True, capture_output=True)
        subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "ca", "-file",
                        str(tls / "ca.pem"), "-keystore", str(tls / "trust.p12"),
                        "-storetype", "PKCS12", "-storepass", _TLS_PASSWORD],
                       check=True, capture_output=True)

    def _tool_log4j(self) -> Path:
        path = self.root / "tools-log4j2.properties"
        if not path.exists():
            path.write_text("status = error\nrootLogger.level = ERROR\n")
        return path

    async def _brokers(self, timeout: float) -> set[int]:
        from aiokafka.admin import AIOKafkaAdminClient

        from streams.kafka.settings import KafkaSettings

        running = [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]
        options = KafkaSettings(**self.client_settings()).client_options()  # type: ignore[arg-type]
        admin = AIOKafkaAdminClient(
            bootstrap_servers=",".join(f"127.0.0.1:{n.port}" for n in running),
            request_timeout_ms=int(max(1.0, timeout) * 1000), **options)
        try:
            await asyncio.wait_for(admin.start(), timeout)
            cluster = await asyncio.wait_for(admin.describe_cluster(), timeout)
            return {int(b["node_id"]) for b in cluster["brokers"]}
        finally:
            with contextlib.suppress(Exception):
                await admin.close()

    def _tail(self, node: _Node, lines: int = 15) -> str:
        text = ""
        for name in ("stdout.log", "server.log"):
            path = node.directory / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return text[-3000:]


_TLS_PASSWORD = "pwevent-test-store"
_CONTROLLER = "controller"


def _cluster_id() -> str:
    """A random KRaft cluster id (22 characters of URL-safe base64, as Kafka makes them)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _accepts(port: int) -> bool:
    """Whether a TCP connection to ``127.0.0.1:port`` is accepted (no client logs a refusal)."""
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _kill_all(nodes: list[_Node]) -> None:
    """SIGKILL every node's JVM still running (a finalizer: no waiting on a clean shutdown)."""
    for node in nodes:
        proc = node.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)


def kill_detached(detached: dict[str, object], timeout: float = 10.0) -> None:
    """SIGKILL the nodes :meth:`ApacheKafka.detach` left running, by pid, each only while its
    command line still names ``kafka.Kafka`` and the cluster's directory (a pid reused by
    another process is left alone), and wait until each is gone."""
    root = str(detached["root"])
    pids = [int(p) for p in detached["pids"]]  # type: ignore[attr-defined]
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmdline and root in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@atexit.register
def _stop_live() -> None:
    for cluster in list(_LIVE):
        _kill_all(cluster.nodes)
