"""A worker's membership of the job's consumer group: its stable identity there
(:func:`default_instance_id`, for static membership), leaving the group when it stops
(:func:`leave_group`), and what an operator does with the group: list its members with their
identities (:func:`describe_group`) and remove the member of a worker that died
(:func:`remove_member`). Identities travel in LeaveGroup v3 and DescribeGroups v4, which aiokafka
does not have."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
from dataclasses import dataclass
from pathlib import Path

import aiokafka.errors as kafka_errors
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.group import MemberAssignment
from aiokafka.protocol.types import Array, Boolean, Bytes, Int16, Int32, Schema, String

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


class _DescribeGroupsResponseV4(Response):
    API_KEY = 15
    API_VERSION = 4
    SCHEMA = Schema(("throttle_time_ms", Int32),
                    ("groups", Array(("error_code", Int16), ("group", String("utf-8")),
                                     ("state", String("utf-8")),
                                     ("protocol_type", String("utf-8")),
                                     ("protocol", String("utf-8")),
                                     ("members", Array(("member_id", String("utf-8")),
                                                       ("group_instance_id", String("utf-8")),
                                                       ("client_id", String("utf-8")),
                                                       ("client_host", String("utf-8")),
                                                       ("member_metadata", Bytes),
                                                       ("member_assignment", Bytes))),
                                     ("authorized_operations", Int32))))


class _DescribeGroupsRequestV4(RequestStruct):
    API_KEY = 15
    API_VERSION = 4
    RESPONSE_TYPE = _DescribeGroupsResponseV4
    SCHEMA = Schema(("groups", Array(String("utf-8"))), ("include_authorized_operations", Boolean))


class _DescribeGroup(Request[_DescribeGroupsRequestV4]):
    """DescribeGroups v4 (KIP-345): each member with its group instance id."""

    API_KEY = 15

    def __init__(self, group: str) -> None:
        self.group = group

    def build(self, request_struct_class: type[_DescribeGroupsRequestV4]
              ) -> _DescribeGroupsRequestV4:
        return request_struct_class([self.group], False)


@dataclass(frozen=True)
class Member:
    """One member of a consumer group: its identity (``None`` for a dynamic member), where it
    connected from and the partitions it holds, by topic."""

    member_id: str
    instance_id: str | None
    client_host: str
    partitions: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class Group:
    """A consumer group as the broker describes it: its state (``Stable``,
    ``PreparingRebalance``, ``CompletingRebalance``, ``Empty``, ``Dead``) and its members."""

    name: str
    state: str
    members: tuple[Member, ...]

    def member(self, instance_id: str) -> Member | None:
        """The member with identity ``instance_id``, if there is one."""
        return next((m for m in self.members if m.instance_id == instance_id), None)


class GroupError(RuntimeError):
    """The broker answered, but with an error (its name is the message)."""


def _partitions(raw: bytes | None) -> dict[str, tuple[int, ...]]:
    """A member's assignment (consumer protocol) by topic; empty while there is none."""
    if not raw:
        return {}
    return {topic: tuple(sorted(parts))
            for topic, parts in MemberAssignment.decode(raw).assignment}


_COORDINATOR_MOVING = (kafka_errors.CoordinatorNotAvailableError,
                       kafka_errors.NotCoordinatorError,
                       kafka_errors.CoordinatorLoadInProgressError)
_COORDINATOR_MOVING_CODES = frozenset(e.errno for e in _COORDINATOR_MOVING)


def _error_code(response: Response) -> int:
    """The error code of a group response (DescribeGroups: its one group's)."""
    groups = getattr(response, "groups", None)
    if groups:
        return int(groups[0][0])
    return int(getattr(response, "error_code", 0) or 0)


async def _with_coordinator(bootstrap: str, group: str, timeout: float,
                            request: Request) -> Response:
    """Send ``request`` to the coordinator of ``group``; raises ``KafkaError``, ``OSError`` or
    ``TimeoutError`` when the broker cannot be reached within ``timeout`` seconds."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **client_options(),
                            request_timeout_ms=int(timeout * 1000))

    async def go() -> Response:
        await client.bootstrap()
        while True:  # Apache Kafka: no coordinator while it creates its offsets topic or moves
            try:     # the coordinator off a failed node; retried until the timeout
                node = await client.coordinator_lookup(CoordinationType.GROUP, group)
                response = await client.send(node, request)
            except _COORDINATOR_MOVING:
                await asyncio.sleep(0.25)
                continue
            if _error_code(response) in _COORDINATOR_MOVING_CODES:
                await asyncio.sleep(0.25)
                continue
            return response

    try:
        return await asyncio.wait_for(go(), timeout)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def describe_group(bootstrap: str, group: str, timeout: float = 10.0) -> Group:
    """``group`` with its members (none, state ``Dead``, for a group the broker does not know);
    raises :class:`GroupError`, or ``KafkaError``, ``OSError`` or ``TimeoutError`` when the
    broker cannot be reached."""
    resp = await _with_coordinator(bootstrap, group, timeout, _DescribeGroup(group))
    error, name, state, _ptype, _protocol, members, _ops = resp.groups[0]
    if error:
        raise GroupError(kafka_errors.for_code(error).__name__)
    return Group(name, state, tuple(
        Member(member_id, instance_id, host.lstrip("/"), _partitions(assignment))
        for member_id, instance_id, _client, host, _meta, assignment in members))


async def remove_member(bootstrap: str, group: str, instance_id: str,
                        timeout: float = 10.0) -> str | None:
    """Remove the static member ``instance_id`` from ``group``: ``None`` when the broker removed
    it, else the error's name (``UnknownMemberIdError``: it was not a member); raises
    ``KafkaError``, ``OSError`` or ``TimeoutError`` when the broker cannot be reached."""
    resp = await _with_coordinator(bootstrap, group, timeout,
                                   _RemoveStaticMember(group, instance_id))
    codes = [resp.error_code] + [m[2] for m in resp.members]
    code = next((c for c in codes if c), 0)
    return None if code == 0 else kafka_errors.for_code(code).__name__


async def leave_group(bootstrap: str, group: str, instance_id: str,
                      timeout: float = 5.0) -> str | None:
    """Remove the static member ``instance_id`` from ``group``, so that the group rebalances and
    its partitions go to the other members now (a static member that merely stops keeps them
    until its session times out; the embedded broker never times one out). Returns ``None``
    when the broker removed it, else the error's name; never raises."""
    try:
        return await remove_member(bootstrap, group, instance_id, timeout)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal: the worker is stopping
        return repr(exc)
