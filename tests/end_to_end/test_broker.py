"""The embedded broker: start, stop, a produce/consume round trip, no stray process."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from local_kafka.embedded import BrokerError, EmbeddedBroker, broker_binary, free_port


def processes_mentioning(text: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_binary_is_the_packaged_executable() -> None:
    path = broker_binary()
    assert path.name == "noida-db" and os.access(path, os.X_OK)


def test_start_and_stop_leave_nothing_behind() -> None:
    broker = EmbeddedBroker()
    broker.start()
    try:
        assert broker.running
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        pid, port, data_dir = broker.pid, broker.port, broker.data_dir
        assert pid is not None and port is not None and data_dir is not None
        assert data_dir.is_dir()
        assert port_open(port)
        assert processes_mentioning(str(data_dir)) == [pid]
        # the loader warning some systems print is not an error and is filtered from the log
        assert "GLIBC" not in broker.log_text()
        assert "kafka" in broker.log_text()
    finally:
        broker.stop()
    assert not broker.running and broker.pid is None
    assert processes_mentioning(str(data_dir)) == []
    assert not data_dir.parent.exists()
    assert not port_open(port)
    broker.stop()  # stopping twice is harmless


def test_round_trip() -> None:
    async def round_trip(bootstrap: str) -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait("roundtrip", key=b"k%d" % i, value=b"v%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            "roundtrip", bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            while len(got) < 10:
                batch = await consumer.getmany(timeout_ms=2000)
                for records in batch.values():
                    got.extend((r.key, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    with EmbeddedBroker() as broker:
        got = asyncio.run(asyncio.wait_for(round_trip(broker.bootstrap), 30))
        pid = broker.pid
    assert got == [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    assert pid is not None and not Path(f"/proc/{pid}").exists()


def test_async_context_manager() -> None:
    async def main() -> int | None:
        async with EmbeddedBroker() as broker:
            assert broker.running
            return broker.pid

    pid = asyncio.run(main())
    assert pid is not None and not Path(f"/proc/{pid}").exists()


def test_busy_port_is_an_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(BrokerError):
            EmbeddedBroker(port, startup_timeout=5).start()
    assert processes_mentioning(f"--kafka-port {port} ") == []


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
