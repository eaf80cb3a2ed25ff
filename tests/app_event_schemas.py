"""The Avro schemas of the app events the Avro source tests produce: version 1 and the next
version, which adds an app version field with a default."""

from __future__ import annotations

DEVICE = {"type": "record", "name": "Device", "namespace": "app",
          "fields": [{"name": "id", "type": "string"}]}
EVENT = {"type": "record", "name": "AppEvent", "namespace": "app", "fields": [
    {"name": "device", "type": DEVICE},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"},
    {"name": "consent", "type": {"type": "enum", "name": "Consent",
                                 "symbols": ["full", "basic"]}},
]}
#: the producers' next version: an app version field
EVENT_V2 = {**EVENT, "fields": [*EVENT["fields"], {"name": "app", "type": "string",
                                                   "default": "?"}]}
