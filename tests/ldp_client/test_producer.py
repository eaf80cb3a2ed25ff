"""The Python client's producer puts each report on ``<prefix>.ldp-reports``, keyed by its
user, byte for byte as the client made it."""

from __future__ import annotations

import asyncio

from local_kafka.embedded import EmbeddedBroker
from mechanisms.local import parse_report
from streams.kafka.offsets import read_topic
from streams.kafka.topics import TopicSpec, create_topics
from streams.ldp_client import LdpClient, ReportConfig, topic_name
from streams.ldp_client.kafka import ReportProducer


def test_reports_reach_the_topic_keyed_by_user() -> None:
    clients = [LdpClient(ReportConfig("lsp", user, d=4, w=2, E=1.0)) for user in ("ann", "bo")]

    async def send() -> list[bytes]:
        sent = []
        async with ReportProducer(broker.bootstrap, "p") as producer:
            for slot in range(4):
                for client in clients:
                    data = await producer.report(client, slot, slot % 4)
                    if data is not None:
                        sent.append(data)
        return sent

    with EmbeddedBroker() as broker:
        asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ldp", topic_name("p"), 2)]))
        sent = asyncio.run(send())
        got = asyncio.run(read_topic(broker.bootstrap, topic_name("p"), partitions=2))
    assert len(sent) == 4  # lsp: slots 0 and 2, two users
    assert sorted(value for _, value in got) == sorted(sent)
    for key, value in got:
        report = parse_report(value)
        assert key == report.user.encode() and report.slot in (0, 2)
