"""Kafka connection settings: flags and environment variables, their checks, and the options
every client and the worker's Faust app receive. The embedded broker speaks plaintext only, so
TLS and SASL are checked down to the objects handed to aiokafka and Faust; a refused SASL login
is checked on the wire, against a listener that refuses every login
(:class:`jobkit.LoginRefusingBroker`)."""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import datetime
import inspect
import os
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import (
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from forked_workers import run_command
from jobkit import LoginRefusingBroker, config

from local_kafka.embedded import free_port
from streams.cli import defaults as cli_defaults
from streams.cli.main import build_parser
from streams.kafka import errors as kafka_errors
from streams.kafka import settings as kafka_settings
from streams.kafka.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
SASL = KafkaSettings(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                     sasl_username="job", sasl_password="wrong")
SASL_FLAGS = ["--security-protocol", "SASL_PLAINTEXT", "--sasl-username", "job"]
#: the kwargs of an aiokafka client or connection that carry the connection's security
SECURITY_KWARGS = ("security_protocol", "sasl_mechanism", "sasl_plain_username",
                   "sasl_plain_password")


@pytest.fixture
def settings() -> Iterator[None]:
    """Restore the process's Kafka settings after a test that configures them."""
    before = kafka_settings.current()
    try:
        yield
    finally:
        kafka_settings.configure(before)


def parse(argv: list[str], environ: dict[str, str] | None = None) -> KafkaSettings:
    parser = argparse.ArgumentParser()
    kafka_settings.add_arguments(parser, environ or {})
    return kafka_settings.from_args(parser.parse_args(argv))


def self_signed(tmp_path: Path) -> tuple[str, str]:
    """A certificate and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_defaults_are_plaintext_with_one_replica():
    settings = parse([])
    assert settings == KafkaSettings()
    assert settings.client_options() == {"security_protocol": "PLAINTEXT"}
    assert settings.faust_options() == {"topic_replication_factor": 1}


def test_environment_variables_give_the_defaults_and_flags_win():
    env = {"PWEVENT_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "PWEVENT_SASL_USERNAME": "job",
           "PWEVENT_SASL_PASSWORD": "s3cret", "PWEVENT_SASL_MECHANISM": "SCRAM-SHA-512",
           "PWEVENT_REPLICATION_FACTOR": "3"}
    settings = parse([], env)
    assert (settings.security_protocol, settings.sasl_mechanism, settings.sasl_username,
            settings.replication_factor) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "job", 3)
    assert settings.client_options() == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "job", "sasl_plain_password": "s3cret"}
    assert parse(["--replication-factor", "2"], env).replication_factor == 2
    assert settings.public()["sasl_password"] == "***"


def test_sasl_ssl_hands_credentials_and_a_tls_context_to_faust(tmp_path: Path):
    cert, key = self_signed(tmp_path)
    settings = parse(["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-256",
                      "--sasl-username", "job", "--sasl-password", "pw", "--ssl-cafile", cert,
                      "--ssl-certfile", cert, "--ssl-keyfile", key, "--replication-factor", "3"])
    options = settings.client_options()
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    faust = settings.faust_options()
    creds = faust["broker_credentials"]
    assert faust["topic_replication_factor"] == 3
    assert (creds.protocol.value, creds.mechanism.value, creds.username) == (
        "SASL_SSL", "SCRAM-SHA-256", "job")
    assert isinstance(creds.ssl_context, ssl.SSLContext)


def test_ssl_alone_uses_tls_credentials(tmp_path: Path):
    cert, _key = self_signed(tmp_path)
    settings = parse(["--security-protocol", "SSL", "--ssl-cafile", cert,
                      "--no-ssl-check-hostname"])
    creds = settings.faust_options()["broker_credentials"]
    assert creds.protocol.value == "SSL"
    assert settings.ssl_context().check_hostname is False
    assert "sasl_mechanism" not in settings.client_options()


@pytest.mark.parametrize(("argv", "message"), [
    (["--security-protocol", "SASL_SSL"], "needs --sasl-username and --sasl-password"),
    (["--sasl-username", "u", "--sasl-password", "p"], "use SASL_SSL or SASL_PLAINTEXT"),
    (["--ssl-cafile", "/nonexistent"], "TLS files are given"),
    (["--security-protocol", "SSL", "--ssl-cafile", "/nonexistent/ca.pem"], "no such file"),
    (["--security-protocol", "SSL", "--ssl-keyfile", __file__], "go together"),
    (["--replication-factor", "0"], "between 1 and 32"),
])
def test_inconsistent_settings_are_one_line(argv: list[str], message: str):
    with pytest.raises(ValueError, match=message) as info:
        parse(argv)
    assert "\n" not in str(info.value)


def test_the_process_settings_reach_every_client():
    before = kafka_settings.current()
    try:
        kafka_settings.configure(KafkaSettings(replication_factor=3))
        assert kafka_settings.faust_options()["topic_replication_factor"] == 3
        assert kafka_settings.client_options() == {"security_protocol": "PLAINTEXT"}
    finally:
        kafka_settings.configure(before)


def test_the_environment_gives_a_child_process_the_same_settings(tmp_path: Path):
    """``pwevent demo`` hands its settings to its worker through the environment: a worker
    parsing that environment (and nothing else) connects the same way."""
    cert, key = self_signed(tmp_path)
    settings = KafkaSettings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                             sasl_username="job", sasl_password="pw", ssl_cafile=cert,
                             ssl_certfile=cert, ssl_keyfile=key, ssl_check_hostname=False,
                             replication_factor=3)
    env = settings.environment()
    assert "pw" not in [v for k, v in env.items() if k != "PWEVENT_SASL_PASSWORD"]
    parser = build_parser()
    worker = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cli_defaults.apply(worker.choices["worker"], "worker", {}, environ=env)
    assert kafka_settings.from_args(parser.parse_args(["worker"])) == settings
    # a plaintext parent clears what its own environment may hold for the child
    plain = KafkaSettings().environment()
    assert plain["PWEVENT_SASL_USERNAME"] == plain["PWEVENT_SASL_PASSWORD"] == ""
    assert parse([], plain) == KafkaSettings()


# -- a refused login ----------------------------------------------------------------------------


def test_an_authentication_error_is_found_behind_the_connection_error(settings: None):
    refused = SaslAuthenticationFailed("Authentication failed")
    try:
        try:
            raise refused
        except SaslAuthenticationFailed as exc:
            raise KafkaConnectionError("Unable to bootstrap") from exc
    except KafkaConnectionError as exc:
        wrapped = exc
    assert kafka_errors.authentication_error(wrapped) is refused
    assert kafka_errors.authentication_error(KafkaConnectionError("x")) is None
    mechanism = UnsupportedSaslMechanismError("Kafka broker does not support PLAIN")
    assert kafka_errors.authentication_error(mechanism) is mechanism
    line = kafka_errors.authentication_failed("h:1", refused)
    assert line.startswith("authentication failed at the broker at h:1 ([Error 58] "
                           "SaslAuthenticationFailed: Authentication failed): check ")
    assert "\n" not in line and "wrong" not in line
    # plaintext settings: a connection error is what it says, nobody is asked
    kafka_settings.configure(KafkaSettings())
    assert asyncio.run(kafka_errors.authentication_failure(
        f"127.0.0.1:{free_port()}", KafkaConnectionError("x"))) is None
    assert kafka_errors.broker_failure("h:1", KafkaConnectionError("x")) == (
        "cannot reach the broker at h:1: KafkaConnectionError: check --broker and that the "
        "broker is running")


def test_a_refused_login_is_told_from_an_unreachable_broker(settings: None):
    """aiokafka reports a refused login as ``KafkaConnectionError``, like a broker that does
    not answer; one SASL handshake tells them apart."""
    kafka_settings.configure(SASL)
    with LoginRefusingBroker() as broker:
        async def bootstrap_error() -> BaseException:
            client = AIOKafkaClient(bootstrap_servers=broker.bootstrap,
                                    **kafka_settings.client_options())
            try:
                await client.bootstrap()
            except Exception as exc:  # noqa: BLE001 - the error under test
                return exc
            finally:
                await client.close()
            raise AssertionError("the login was accepted")

        exc = asyncio.run(bootstrap_error())
        assert isinstance(exc, KafkaConnectionError)
        refused = asyncio.run(kafka_errors.authentication_failure(broker.bootstrap, exc))
        assert isinstance(refused, SaslAuthenticationFailed)
        assert kafka_errors.broker_failure(broker.bootstrap, exc).startswith(
            f"authentication failed at the broker at {broker.bootstrap} ([Error 58] "
            f"SaslAuthenticationFailed: Authentication failed: Invalid username or password)")
        assert {m for _client, m in broker.handshakes} == {"PLAIN"}
        assert set(broker.users) == {"job"}
    down = f"127.0.0.1:{free_port()}"
    assert kafka_errors.broker_failure(down, KafkaConnectionError("x")).startswith(
        f"cannot reach the broker at {down}: KafkaConnectionError")


def run_cli(*argv: str, timeout: float = 120) -> tuple[int, list[str]]:
    """``pwevent ARGV`` as a child process: its exit status and its stderr's lines."""
    env = dict(os.environ, PWEVENT_SASL_PASSWORD="wrong", PWEVENT_SECRET="test-secret")
    done = run_command(argv, env=env, timeout=timeout, cwd=ROOT, text=True)
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


def test_commands_report_a_refused_login_in_one_line(tmp_path: Path):
    with LoginRefusingBroker() as broker:
        refused = (f"authentication failed at the broker at {broker.bootstrap} ([Error 58] "
                   f"SaslAuthenticationFailed: Authentication failed: Invalid username or "
                   f"password): check --sasl-mechanism")
        code, lines = run_cli("topics", "create", "--broker", broker.bootstrap, *SASL_FLAGS)
        assert (code, len(lines)) == (2, 1), lines
        assert lines[0].startswith(f"pwevent topics: error: {refused}"), lines
        started = time.monotonic()
        code, lines = run_cli("worker", "--broker", broker.bootstrap, *SASL_FLAGS,
                              "--data-dir", str(tmp_path / "data"), "--startup-timeout", "20")
        assert (code, len(lines)) == (2, 1), lines
        assert lines[0].startswith(f"pwevent worker: error: {refused}"), lines
        assert time.monotonic() - started < 20  # not retried until the timeout
        assert not (tmp_path / "data").exists()
        code, lines = run_cli("releases", "--broker", broker.bootstrap, *SASL_FLAGS,
                              "--timeout", "10")
        assert (code, len(lines)) == (2, 1), lines
        assert lines[0].startswith(f"pwevent releases: error: {refused}"), lines
        assert set(broker.users) == {"job"}


def test_the_readiness_probe_logs_in_with_the_process_settings(settings: None):
    """The broker probe behind /readyz connects like every other client: with SASL settings it
    authenticates, and a refused login is the reason /readyz gives."""
    from streams.job.operations.observe import Observer

    kafka_settings.configure(SASL)
    with LoginRefusingBroker() as broker:
        async def probe() -> tuple[bool, str | None]:
            observer = Observer(SimpleNamespace(broker=broker.bootstrap), port=0)
            try:
                return await observer.probe_broker(), observer.not_ready()
            finally:
                await observer.on_stop()

        answered, reason = asyncio.run(probe())
        assert not answered
        assert ("pwevent-probe", "PLAIN") in broker.handshakes  # the probe's own login
        assert set(broker.users) == {"job"}
        assert reason is not None and reason.startswith(
            f"authentication failed at the broker at {broker.bootstrap} ([Error 58] "
            "SaslAuthenticationFailed"), reason


# -- every client gets the settings ---------------------------------------------------------------

#: What builds a Kafka client or connection of its own.
CLIENT_BUILDERS = ("AIOKafkaClient", "AIOKafkaConsumer", "AIOKafkaProducer",
                   "AIOKafkaAdminClient", "create_conn")
#: Client sites exempt from the process's settings (none: the local brokers' readiness probes,
#: which connect in plaintext or with their own cluster's credentials, live in local_kafka/,
#: outside the shipped package)
PLAINTEXT_ONLY: set[tuple[str, str]] = set()


def client_sites() -> set[tuple[str, str]]:
    """Every place in ``streams/`` that builds a Kafka client: (file, function)."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, path: str, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = [*scope, child.name]
                if not isinstance(child, ast.ClassDef):
                    inner.append("<locals>")
                visit(child, path, inner)
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                if name in CLIENT_BUILDERS:
                    found.add((path, ".".join(scope).removesuffix(".<locals>")))
            visit(child, path, scope)

    for path in sorted((ROOT / "streams").rglob("*.py")):
        visit(ast.parse(path.read_text()), str(path.relative_to(ROOT)), [])
    return found


def caller_site() -> tuple[str, str] | None:
    """The innermost frame of ``streams/`` on the stack: (file, function)."""
    frame = inspect.currentframe()
    streams = ROOT / "streams"
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(streams):
            return str(path.relative_to(ROOT)), frame.f_code.co_qualname
        frame = frame.f_back
    return None


async def build_every_client(bootstrap: str, tmp_path: Path) -> None:
    """Run each code path that builds a Kafka client against ``bootstrap`` (which does not
    answer): each builds its client, fails to connect, and is done."""
    from collections import Counter

    from streams.cli.audit import fetch_topics
    from streams.cli.demo import follow_releases
    from streams.cli.replay_rounds import DecisionReader
    from streams.job.config import JobConfig
    from streams.job.operations.observe import Observer
    from streams.job.source.history_start import begin_after_history
    from streams.job.source.mapping import SourceMapping
    from streams.job.source.rekey import Rekeyer, SourceSettings
    from streams.job.worker.local_state import changelog_ends, send_records
    from streams.job.worker.membership import leave_group
    from streams.job.worker.partition_runner import PartitionRunner
    from streams.job.worker.preflight import partition_counts
    from streams.kafka.offsets import committed_offsets, end_offsets, holds_records, read_topic
    from streams.kafka.producer import RawProducer
    from streams.kafka.topics import Topics, create_topics, describe_topics
    from streams.ldp_client.kafka import ReportProducer
    from streams.ldp_collector.kafka_job import LdpJob, LdpJobSettings
    from streams.releases.client import aiter_releases, read_start_record

    topics = Topics(prefix="settings")
    observer = Observer(SimpleNamespace(broker=bootstrap), port=0)
    cfg = JobConfig(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 2}, secret="x")
    source = SourceSettings(("t",), SourceMapping.from_flags("u", None, ["v"], cfg.domain),
                            ("w=3,E=1",))
    rekeyer = Rekeyer(cfg, source, topics, None, None, Counter(), send_reports=None)
    producer = RawProducer(bootstrap, topics.reports, 1)
    attempts = [
        fetch_topics(bootstrap, [topics.releases], timeout=2),
        follow_releases(bootstrap, topics.releases, 1, time.monotonic() + 2, False),
        leave_group(bootstrap, "group", "instance", timeout=2),
        observer.probe_broker(),
        PartitionRunner.read_decisions(SimpleNamespace(broker=bootstrap, topics=topics)),
        partition_counts(bootstrap, 0.5),
        changelog_ends(bootstrap, "app", ["users"], 1),
        send_records(bootstrap, [(topics.releases, b"s/0", b"{}", 0)], 1),
        end_offsets(bootstrap, topics.reports, 1),
        committed_offsets(bootstrap, "group", topics.reports),
        holds_records(bootstrap, topics.reports, 0, 0, 1, limit=2),
        read_topic(bootstrap, topics.reports, limit=2),
        producer.start(),
        create_topics(bootstrap, topics.specs(), timeout=2),
        describe_topics(bootstrap, [topics.reports], timeout=2),
        read_start_record(bootstrap, topics.decisions, "s/start", 2),
        anext(aiter_releases(bootstrap, topics.releases, timeout=2)),
        kafka_errors.authentication_failure(bootstrap, KafkaConnectionError("x"), 2),
        rekeyer.follow(bootstrap, "group"),
        begin_after_history(bootstrap, "group", {topics.reports: 1}, 0),
        ReportProducer(bootstrap, "settings").__aenter__(),
        LdpJob(LdpJobSettings(bootstrap, "settings", "s", "lbu", 2, 0, 1000, 0, 1.0, 2,
                              b"x")).run(asyncio.Event()),
        DecisionReader(LdpJobSettings(bootstrap, "settings", "s", "lbd", 2, 0, 1000, 0, 1.0,
                                      2, b"x")).start(),
    ]
    for attempt in attempts:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(attempt, 10)
    await observer.on_stop()


def test_every_kafka_client_the_code_builds_gets_the_connection_settings(
        settings: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Each aiokafka client and connection built by the code, wherever it is built, carries the
    process's TLS and SASL settings; a place that builds a client but is not run here fails the
    test, so a new client cannot be missed."""
    built: list[tuple[tuple[str, str] | None, dict[str, Any]]] = []

    def record(cls: type) -> None:
        init = cls.__init__

        def recording(self: Any, *args: Any, **kwargs: Any) -> None:
            built.append((caller_site(), {k: kwargs.get(k) for k in SECURITY_KWARGS}))
            init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", recording)

    record(AIOKafkaClient)  # every consumer, producer and admin client builds one
    record(AIOKafkaConnection)
    kafka_settings.configure(SASL)
    asyncio.run(build_every_client(f"127.0.0.1:{free_port()}", tmp_path))

    expected = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "job", "sasl_plain_password": "wrong"}
    wrong = [(site, kwargs) for site, kwargs in built if kwargs != expected]
    assert not wrong, wrong
    sites = client_sites()
    assert len(sites) >= 16, sites
    missed = sites - PLAINTEXT_ONLY - {site for site, _kwargs in built}
    assert not missed, f"Kafka clients built but not exercised here: {sorted(missed)}"


def test_every_consumer_the_code_builds_reads_only_what_transactions_committed(
        settings: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Each aiokafka consumer the code builds reads ``read_committed`` (the worker's Faust
    consumer: tests/end_to_end/test_faust_adapter.py), so no consumer of pwevent hands over a
    record of an aborted transaction."""
    from aiokafka import AIOKafkaConsumer

    levels: list[tuple[tuple[str, str] | None, str]] = []
    init = AIOKafkaConsumer.__init__

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        levels.append((caller_site(), kwargs.get("isolation_level", "read_uncommitted")))
        init(self, *args, **kwargs)

    monkeypatch.setattr(AIOKafkaConsumer, "__init__", recording)
    asyncio.run(build_every_client(f"127.0.0.1:{free_port()}", tmp_path))
    assert len({site for site, _level in levels}) >= 10, levels
    assert all(level == "read_committed" for _site, level in levels), levels


def test_the_workers_faust_clients_get_the_connection_settings(settings: None, tmp_path: Path):
    """The worker's Faust app hands the same settings to every aiokafka client it builds
    (consumers, producer, admin), and creates its changelog and assignor topics with the
    replication factor."""
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from streams.job.worker.faust_job import Job

    kafka_settings.configure(KafkaSettings(**{**vars(SASL), "replication_factor": 3}))
    job = Job(config("faust-settings"), "127.0.0.1:1", tmp_path / "data")
    auth = credentials_to_aiokafka_auth(job.app.conf.broker_credentials)
    assert {k: auth.get(k) for k in SECURITY_KWARGS} == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "job", "sasl_plain_password": "wrong"}

    async def faust_producer() -> tuple[str, str]:
        producer = job.app.producer._new_producer()
        try:
            return producer.client._security_protocol, producer.client._sasl_plain_username
        finally:
            await producer.stop()  # never started: closes its client

    assert asyncio.run(faust_producer()) == ("SASL_PLAINTEXT", "job")

    declared: list[tuple[str, int]] = []

    class Recorder:
        async def create_topic(self, topic: str, partitions: int, replication: int,
                               **_: Any) -> None:
            declared.append((topic, replication))

    async def recorder() -> Recorder:
        return Recorder()

    created = [job.users.changelog_topic, job.checkpoints.changelog_topic,
               job.state.changelog_topic, job.app._leader_assignor._leader_topic]
    for topic in created:
        topic._get_producer = recorder

    async def declare() -> None:
        for topic in created:
            await topic.declare()

    asyncio.run(declare())
    names = {name for name, _r in declared}
    assert {f"{job.group_id}-{table}-changelog" for table in ("users", "checkpoints",
                                                              "coordinator")} <= names
    assert f"{job.group_id}-__assignor-__leader" in names
    assert {r for _name, r in declared} == {3}, declared
