"""Telling a failed authentication from an unreachable broker, in one line.

aiokafka's clients catch the error of a failed SASL handshake while they bootstrap, log it and
raise ``KafkaConnectionError("Unable to bootstrap from ...")``: the same error as for a broker
that does not answer. :func:`authentication_failure` tells the two apart (the error itself or
its cause when it is an authentication error; else, when the process's settings use SASL, one
handshake with the broker), and every command and the worker's readiness check report a
refused login as such (:func:`authentication_failed`) rather than as an unreachable broker
(:func:`unreachable`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from aiokafka.conn import create_conn, get_ip_port_afi
from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    IllegalSaslStateError,
    KafkaConnectionError,
    NodeNotReadyError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from streams.kafka.settings import client_options, current

__all__ = [
    "AUTHENTICATION_ERRORS",
    "HANDSHAKE_TIMEOUT_S",
    "authentication_error",
    "authentication_failed",
    "authentication_failure",
    "broker_failure",
    "unreachable",
]

#: aiokafka's errors of a SASL handshake that the broker refused.
AUTHENTICATION_ERRORS: Final = (
    SaslAuthenticationFailed,
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)
#: Errors that mean "no connection": behind them may hide a refused handshake.
_CONNECTION_ERRORS: Final = (KafkaConnectionError, NodeNotReadyError, OSError, TimeoutError)
HANDSHAKE_TIMEOUT_S: Final = 5.0


def authentication_error(exc: BaseException | None) -> BaseException | None:
    """``exc``, or an exception it was raised from, that is an authentication error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, AUTHENTICATION_ERRORS):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


async def _handshake(bootstrap: str, timeout: float) -> BaseException | None:
    """The authentication error of one connection to the first bootstrap address that answers
    (``None``: the handshake succeeded, or no address answered)."""
    for address in bootstrap.split(","):
        try:
            host, port, _family = get_ip_port_afi(address)
        except ValueError:
            continue
        try:
            async with asyncio.timeout(timeout):
                conn = await create_conn(host, port, client_id="pwevent-diagnosis",
                                         request_timeout_ms=int(timeout * 1000),
                                         **client_options())
        except AUTHENTICATION_ERRORS as exc:
            return exc
        except Exception:  # noqa: BLE001 - no answer, or another failure: not a refused login
            continue
        with contextlib.suppress(Exception):
            conn.close()
        return None
    return None


async def authentication_failure(bootstrap: str, exc: BaseException,
                                 timeout: float = HANDSHAKE_TIMEOUT_S) -> BaseException | None:
    """The authentication error behind ``exc``, the failure of a Kafka client of this process:
    ``exc`` or its cause when it is one; for a connection error under SASL settings, the error
    of one SASL handshake with the broker. ``None`` when the login is not what failed; never
    raises."""
    found = authentication_error(exc)
    if found is not None or not current().sasl or not isinstance(exc, _CONNECTION_ERRORS):
        return found
    return await _handshake(bootstrap, timeout)


def authentication_failed(bootstrap: str, err: BaseException) -> str:
    """One line: the broker refused this process's login."""
    detail = str(err).strip()
    name = type(err).__name__
    what = detail if name in detail else f"{name}: {detail}" if detail else name
    return (f"authentication failed at the broker at {bootstrap} ({what}): check "
            f"--sasl-mechanism, --sasl-username and --sasl-password (or PWEVENT_SASL_MECHANISM, "
            f"PWEVENT_SASL_USERNAME and PWEVENT_SASL_PASSWORD)")


def unreachable(bootstrap: str, exc: BaseException) -> str:
    """One line: the broker did not answer."""
    return (f"cannot reach the broker at {bootstrap}: {type(exc).__name__}: check --broker and "
            f"that the broker is running")


def broker_failure(bootstrap: str, exc: BaseException,
                   timeout: float = HANDSHAKE_TIMEOUT_S) -> str:
    """One line for a command whose Kafka client failed with ``exc`` (called outside an event
    loop): :func:`authentication_failed` when the login was refused, else
    :func:`unreachable`."""
    err = asyncio.run(authentication_failure(bootstrap, exc, timeout))
    return unreachable(bootstrap, exc) if err is None else authentication_failed(bootstrap, err)
