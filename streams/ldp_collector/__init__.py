"""The local-DP collector, in process (docs/ldp-reports.md, "How the collector reads the
reports"): it reads one stream's randomised reports, keeps what the protocol allows and releases
each slot's debiased counts with their standard deviations.

    collector = LdpCollector("lbu", d=8, origin_ms=0, slot_ms=60_000, start=0, E=1.0, w=10)
    dead = collector.offer(key, value, timestamp_ms)  # None, or DeadLetter(reason, value)
    release = collector.close(collector.next_slot)

The estimates are :mod:`mechanisms.local.collector`'s. On Kafka, :mod:`.stream_time` applies
the event-time rule over the topic's partitions and :mod:`.kafka_job` reads and writes the topics
(``pwevent worker --mechanism lbu|lsp|lpu|plbu``).
"""

from streams.ldp_collector.checks import REASONS, Stream
from streams.ldp_collector.collector import DeadLetter, LdpCollector

__all__ = ["REASONS", "DeadLetter", "LdpCollector", "Stream"]
