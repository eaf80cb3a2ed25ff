"""The Python local-DP client: randomises one user's reports on the device and keeps the user's
per-window budget (docs/ldp-reports.md, docs/app-developers.md).

    client = LdpClient(ReportConfig("lbu", user="alice", d=8, w=10, E=1.0, start=first_slot))
    data = client.report(slot, cell)  # bytes, or None when the user does not report there

The math is :mod:`mechanisms.local`; :mod:`streams.ldp_client.kafka` produces the bytes.
"""

from mechanisms.local import LedgerRefusal, ReportConfig
from streams.ldp_client.client import CLIENT_NAME, LdpClient, SystemWords, slot_of, topic_name

__all__ = ["CLIENT_NAME", "LdpClient", "LedgerRefusal", "ReportConfig", "SystemWords", "slot_of",
           "topic_name"]
