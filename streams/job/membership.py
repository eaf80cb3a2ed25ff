"""A worker's membership of the job's consumer group: its stable identity there
(:func:`default_instance_id`, for static membership) and leaving the group when it stops
(:func:`leave_group`, a LeaveGroup v3 request that aiokafka does not have)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from pathlib import Path

import aiokafka.errors as kafka_errors
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from streams.kafka.settings import client_options


def default_instance_id(data_dir: Path) -> str:
    """A worker's stable identity in the consumer group: its host and its data directory."""
    digest = hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()}-{digest}"


class _LeaveGroupResponseV3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16),
                    ("members", Array(("member_id", String("utf-8")),
                                      ("group_instance_id", String("utf-8")),
                                      ("error_code", Int16))))


class _LeaveGroupRequestV3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(("group", String("utf-8")),
                    ("members", Array(("member_id", String("utf-8")),
                                      ("group_instance_id", String("utf-8")))))


class _RemoveStaticMember(Request[_LeaveGroupRequestV3]):
    """LeaveGroup v3 (KIP-345) naming a member by its group instance id and no member id: how
    Kafka's admin client removes a static member (aiokafka knows LeaveGroup v0 and v1 only)."""

    API_KEY = 13

    def __init__(self, group: str, instance_id: str) -> None:
        self.group, self.instance_id = group, instance_id

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        return request_struct_class(self.group, [("", self.instance_id)])


async def leave_group(bootstrap: str, group: str, instance_id: str,
                      timeout: float = 5.0) -> str | None:
    """Remove the static member ``instance_id`` from ``group``, so that the group rebalances and
    its partitions go to the other members now (a static member that merely stops keeps them
    until its session times out; the embedded broker never times one out). Returns ``None``
    when the broker removed it, else the error's name (``UnknownMemberIdError``: it was not a
    member); never raises."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **client_options(),
                            request_timeout_ms=int(timeout * 1000))

    async def go() -> str | None:
        await client.bootstrap()
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        resp = await client.send(node, _RemoveStaticMember(group, instance_id))
        codes = [resp.error_code] + [m[2] for m in resp.members]
        code = next((c for c in codes if c), 0)
        return None if code == 0 else kafka_errors.for_code(code).__name__

    try:
        return await asyncio.wait_for(go(), timeout)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal: the worker is stopping
        return repr(exc)
    finally:
        with contextlib.suppress(Exception):
            await client.close()
