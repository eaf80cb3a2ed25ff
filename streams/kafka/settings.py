"""How pwevent connects to Kafka: security (TLS, SASL) and the replication factor of the topics
it creates.

Every command that talks to Kafka takes the same flags (:func:`add_arguments`), each also read
from an environment variable (``PWEVENT_SECURITY_PROTOCOL``, ``PWEVENT_SASL_PASSWORD``, ...),
and, through the command line's ``--config`` file, from a TOML file. A command calls
:func:`configure` once with what it parsed; every Kafka client of the process then takes its
options from :func:`client_options` (aiokafka clients; :func:`consumer_options` for consumers,
which read only what transactions committed) or :func:`faust_options` (the worker's Faust app),
so a new client cannot forget them.

Defaults connect without TLS or SASL and create topics with one replica, which suits the
embedded broker and a single-broker test cluster; a production cluster wants
``--replication-factor 3`` and, usually, ``--security-protocol SASL_SSL``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import ssl
from collections.abc import Mapping
from typing import Any, Final

from streams.kafka import fetch_pacing

# Every Kafka client of pwevent takes its options from this module, so each one is paced here.
fetch_pacing.install()

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclasses.dataclass(frozen=True)
class KafkaSettings:
    """Connection security and the replication factor of created topics."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    replication_factor: int = 1

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What is inconsistent in these settings, in one line; ``None`` when nothing is."""
        if self.security_protocol not in PROTOCOLS:
            return (f"--security-protocol must be one of {', '.join(PROTOCOLS)}, not "
                    f"{self.security_protocol!r}")
        if self.sasl:
            if self.sasl_mechanism not in MECHANISMS:
                return (f"--sasl-mechanism must be one of {', '.join(MECHANISMS)}, not "
                        f"{self.sasl_mechanism!r}")
            if not self.sasl_username or self.sasl_password is None:
                return (f"--security-protocol {self.security_protocol} needs --sasl-username and "
                        f"--sasl-password (or PWEVENT_SASL_USERNAME and PWEVENT_SASL_PASSWORD)")
        elif self.sasl_username or self.sasl_password:
            return (f"--sasl-username/--sasl-password are given but --security-protocol is "
                    f"{self.security_protocol}: use SASL_SSL or SASL_PLAINTEXT")
        if not self.tls and (self.ssl_cafile or self.ssl_certfile or self.ssl_keyfile):
            return (f"TLS files are given but --security-protocol is {self.security_protocol}: "
                    f"use SSL or SASL_SSL")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            return "--ssl-certfile and --ssl-keyfile go together (a client certificate and its key)"
        for flag, path in (("--ssl-cafile", self.ssl_cafile), ("--ssl-certfile", self.ssl_certfile),
                           ("--ssl-keyfile", self.ssl_keyfile)):
            if path and not os.path.isfile(path):
                return f"{flag} {path}: no such file"
        if not 1 <= self.replication_factor <= 32:
            return f"--replication-factor must be between 1 and 32, not {self.replication_factor}"
        return None

    @property
    def tls(self) -> bool:
        """Whether connections use TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Whether connections authenticate with SASL."""
        return self.security_protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (the system's trusted CAs unless ``ssl_cafile``), or ``None``."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        context.check_hostname = self.ssl_check_hostname
        return context

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's clients (consumer, producer, admin, client)."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.tls:
            options["ssl_context"] = self.ssl_context()
        if self.sasl:
            options.update(sasl_mechanism=self.sasl_mechanism,
                           sasl_plain_username=self.sasl_username,
                           sasl_plain_password=self.sasl_password)
        return options

    def faust_options(self) -> dict[str, Any]:
        """Settings for ``faust.App``: credentials and the replication factor of the topics the
        app creates itself (tables' changelogs, the assignor's topic)."""
        from faust.auth import SASLCredentials, SSLCredentials

        options: dict[str, Any] = {"topic_replication_factor": self.replication_factor}
        if self.sasl:
            options["broker_credentials"] = SASLCredentials(
                username=self.sasl_username, password=self.sasl_password,
                ssl_context=self.ssl_context(), mechanism=self.sasl_mechanism)
        elif self.tls:
            options["broker_credentials"] = SSLCredentials(self.ssl_context())
        return options

    def environment(self) -> dict[str, str]:
        """The ``PWEVENT_...`` variables that give a child ``pwevent`` process these settings
        (every one set, ``""`` for none, so that the parent's own variables cannot leak in); the
        password stays out of the child's argument list."""
        def text(value: str | None) -> str:
            return "" if value is None else value

        return {
            "PWEVENT_SECURITY_PROTOCOL": self.security_protocol,
            "PWEVENT_SASL_MECHANISM": self.sasl_mechanism,
            "PWEVENT_SASL_USERNAME": text(self.sasl_username),
            "PWEVENT_SASL_PASSWORD": text(self.sasl_password),
            "PWEVENT_SSL_CAFILE": text(self.ssl_cafile),
            "PWEVENT_SSL_CERTFILE": text(self.ssl_certfile),
            "PWEVENT_SSL_KEYFILE": text(self.ssl_keyfile),
            "PWEVENT_SSL_CHECK_HOSTNAME": "true" if self.ssl_check_hostname else "false",
            "PWEVENT_REPLICATION_FACTOR": str(self.replication_factor),
        }

    def public(self) -> dict[str, Any]:
        """The settings without the password, for logs."""
        out = dataclasses.asdict(self)
        if out["sasl_password"] is not None:
            out["sasl_password"] = "***"
        return out


_current = KafkaSettings()


def configure(settings: KafkaSettings) -> None:
    """Make ``settings`` the process's Kafka settings (a command does this once, at start)."""
    global _current
    _current = settings


def current() -> KafkaSettings:
    """The process's Kafka settings."""
    return _current


def client_options() -> dict[str, Any]:
    """:meth:`KafkaSettings.client_options` of the process's settings."""
    return _current.client_options()


#: How every consumer of pwevent reads: only what transactional producers committed. A record of
#: an aborted transaction is never handed over; a partition is read up to its last stable
#: offset, so the records of a transaction still open wait until it ends. Topics written without
#: transactions (every topic the job writes itself) read the same either way.
ISOLATION_LEVEL: Final = "read_committed"


def consumer_options() -> dict[str, Any]:
    """:func:`client_options` and :data:`ISOLATION_LEVEL`: the keyword arguments of every
    aiokafka consumer of the process."""
    return {**_current.client_options(), "isolation_level": ISOLATION_LEVEL}


def faust_options() -> dict[str, Any]:
    """:meth:`KafkaSettings.faust_options` of the process's settings."""
    return _current.faust_options()


def _env(name: str, environ: Mapping[str, str]) -> str | None:
    value = environ.get(f"PWEVENT_{name}")
    return value if value not in (None, "") else None


def add_arguments(parser: argparse.ArgumentParser,
                  environ: Mapping[str, str] | None = None) -> None:
    """The connection flags, each defaulting to its ``PWEVENT_...`` environment variable."""
    env = os.environ if environ is None else environ
    group = parser.add_argument_group("Kafka connection")
    group.add_argument("--security-protocol", choices=PROTOCOLS,
                       default=_env("SECURITY_PROTOCOL", env) or "PLAINTEXT",
                       help="how to connect to the brokers (env PWEVENT_SECURITY_PROTOCOL) "
                            "(default: %(default)s)")
    group.add_argument("--sasl-mechanism", choices=MECHANISMS,
                       default=_env("SASL_MECHANISM", env) or "PLAIN",
                       help="SASL mechanism with SASL_SSL or SASL_PLAINTEXT "
                            "(env PWEVENT_SASL_MECHANISM) (default: %(default)s)")
    group.add_argument("--sasl-username", default=_env("SASL_USERNAME", env),
                       help="SASL user name (env PWEVENT_SASL_USERNAME) (default: none)")
    group.add_argument("--sasl-password", default=_env("SASL_PASSWORD", env),
                       help="SASL password; prefer the environment variable "
                            "PWEVENT_SASL_PASSWORD, which no process listing shows "
                            "(default: none)")
    group.add_argument("--ssl-cafile", default=_env("SSL_CAFILE", env),
                       help="CA certificates (PEM) to verify the brokers with "
                            "(env PWEVENT_SSL_CAFILE) (default: the system's)")
    group.add_argument("--ssl-certfile", default=_env("SSL_CERTFILE", env),
                       help="client certificate (PEM) for mutual TLS "
                            "(env PWEVENT_SSL_CERTFILE) (default: none)")
    group.add_argument("--ssl-keyfile", default=_env("SSL_KEYFILE", env),
                       help="the client certificate's private key (PEM) "
                            "(env PWEVENT_SSL_KEYFILE) (default: none)")
    group.add_argument("--no-ssl-check-hostname", dest="ssl_check_hostname",
                       action="store_false",
                       default=(_env("SSL_CHECK_HOSTNAME", env) or "true").lower()
                       not in ("0", "false", "no"),
                       help="do not check that a broker's certificate names its host "
                            "(env PWEVENT_SSL_CHECK_HOSTNAME=false) (default: %(default)s, "
                            "the host is checked)")
    group.add_argument("--replication-factor", type=int,
                       default=int(_env("REPLICATION_FACTOR", env) or 1),
                       help="replicas of every topic pwevent creates, the workers' changelogs "
                            "included (env PWEVENT_REPLICATION_FACTOR) (default: %(default)s; "
                            "use 3 on a production cluster)")


def from_args(args: argparse.Namespace) -> KafkaSettings:
    """The settings parsed by :func:`add_arguments`; raises ``ValueError`` (one line) when they
    are inconsistent."""
    return KafkaSettings(
        security_protocol=args.security_protocol, sasl_mechanism=args.sasl_mechanism,
        sasl_username=args.sasl_username, sasl_password=args.sasl_password,
        ssl_cafile=args.ssl_cafile, ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile, ssl_check_hostname=args.ssl_check_hostname,
        replication_factor=args.replication_factor)
