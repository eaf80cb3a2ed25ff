"""A worker's log lines as JSON: :func:`json_logging_config` configures Python's logging (Faust's
included) to write one JSON object per line, made by :class:`JsonFormatter`."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Final

import orjson

#: attributes every log record has: anything else was given with ``extra=``
_RECORD_ATTRS: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, then the fields given with ``extra=``, and ``exc``/``stack`` when present."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        stamp = datetime.fromtimestamp(record.created, UTC)
        doc: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                doc.setdefault(key, value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(doc, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def json_logging_config(loglevel: str | int = "info") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` document: every record, Faust's included, as one
    JSON line on standard output."""
    level = logging.getLevelName(loglevel.upper()) if isinstance(loglevel, str) else loglevel
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json",
                                 "stream": "ext://sys.stdout", "level": level}},
        "root": {"level": level, "handlers": ["default"]},
    }
