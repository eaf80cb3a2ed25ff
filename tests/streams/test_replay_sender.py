"""The replay's sender judges a silence only after reading the answers already received."""

from __future__ import annotations

import asyncio
import socket
import time

from local_kafka.embedded import free_port
from streams.cli.replay_sender import ResilientSender


def test_answers_that_came_while_the_process_was_paused_are_not_an_outage() -> None:
    """The replay is paused (SIGSTOP, a suspended laptop) while the broker's answer arrives,
    and the broker is gone when it runs again. On resuming, the wait's timer and the answer
    are both due at once; the answer needs a few turns of the loop to reach the sender. The
    sender must read it before it probes the broker, or it reports an outage (and later a
    "reconnected" notice) for a slot the broker had acknowledged."""
    lines: list[str] = []

    async def scenario() -> tuple[str, ResilientSender]:
        # nothing listens on the bootstrap address: a probe would find the broker gone
        sender = ResilientSender(f"127.0.0.1:{free_port()}", "reports", 1, timeout=30.0,
                                 notify=lines.append, probe_every=1.0)
        loop = asyncio.get_running_loop()
        theirs, ours = socket.socketpair()
        ours.setblocking(False)
        try:
            async def acknowledged() -> str:
                await loop.sock_recv(ours, 1)
                for _ in range(5):  # the client's parsing and the batch futures
                    await asyncio.sleep(0)
                return "acknowledged"

            def paused() -> None:
                theirs.send(b"a")  # the answer arrives ...
                time.sleep(1.3)  # ... while the process does not run

            loop.call_later(0.1, paused)
            return await sender._watch(acknowledged(), time.monotonic()), sender
        finally:
            theirs.close()
            ours.close()

    result, sender = asyncio.run(scenario())
    assert result == "acknowledged"
    assert sender.trouble_since is None and not sender.unreachable
    assert lines == []


def test_a_silence_with_the_broker_gone_is_still_an_outage() -> None:
    """Nothing is answered and nothing listens: the probe marks the outage, and the sender
    gives up at its deadline."""

    async def scenario() -> ResilientSender:
        sender = ResilientSender(f"127.0.0.1:{free_port()}", "reports", 1, timeout=2.0,
                                 notify=lambda line: None, probe_every=0.5)
        never = asyncio.get_running_loop().create_future()
        started = time.monotonic()
        try:
            await sender._watch(never, started)
        except Exception as exc:  # noqa: BLE001 - the type is checked below
            assert type(exc).__name__ == "BrokerUnavailable", exc
            assert "has been unreachable for 2 s" in str(exc)
            assert 2.0 <= time.monotonic() - started < 3.5
        else:
            raise AssertionError("the sender waited on a broker that is gone")
        return sender

    sender = asyncio.run(scenario())
    assert sender.unreachable and sender.trouble_since is not None and sender.gave_up
