"""Kafka connection settings: flags and environment variables, their checks, and the options
every client and the worker's Faust app receive. The embedded broker speaks plaintext only, so
TLS and SASL are checked down to the objects handed to aiokafka and Faust, not on the wire."""

from __future__ import annotations

import argparse
import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from streams.kafka import settings as kafka_settings
from streams.kafka.settings import KafkaSettings


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
