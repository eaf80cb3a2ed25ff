"""Producing a client's reports to the stream's ``<prefix>.ldp-reports`` topic with aiokafka
(an app with its own producer sends the bytes itself: key = the user id's UTF-8 bytes)."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer

from streams.kafka.settings import client_options
from streams.ldp_client.client import LdpClient, topic_name


class ReportProducer:
    """An aiokafka producer of reports: ``async with ReportProducer(servers, prefix) as p:
    await p.report(client, slot, value)``."""

    def __init__(self, bootstrap_servers: str, prefix: str, **options: object) -> None:
        """A producer for the stream whose topics are named ``<prefix>.<topic>``, with the
        process's connection settings (TLS, SASL: :func:`streams.kafka.settings.client_options`)
        unless ``options`` overrides them."""
        self.topic = topic_name(prefix)
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all",
                                         enable_idempotence=True,
                                         **(client_options() | options))

    async def __aenter__(self) -> ReportProducer:
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def send(self, user: str, data: bytes) -> None:
        """Produce one report's bytes, keyed by its user, and wait for the broker."""
        await self.producer.send_and_wait(self.topic, data, key=user.encode("utf-8"))

    async def report(self, client: LdpClient, slot: int, value: int | None) -> bytes | None:
        """Randomise and produce the client's report at ``slot`` if it has one; the bytes
        sent, or None. The ledger has spent the budget even if the send fails: a report is
        never randomised twice."""
        data = client.report(slot, value)
        if data is not None:
            await self.send(client.config.user, data)
        return data
