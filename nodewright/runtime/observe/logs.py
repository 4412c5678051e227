"""Structured, Kubernetes-style logging: capitalised past-tense messages with key/value pairs.

Owns ``get_logger`` (a thin wrapper over the standard ``logging`` module that takes keyword
pairs), the JSON formatter used by the manager, and ``log_context``: context-local pairs (such
as the reconcile ID, controller and object) that every line logged inside it carries.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["JsonFormatter", "Logger", "configure", "get_logger", "log_context"]

_NO_PAIRS: Mapping[str, Any] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "nodewright_log_context", default=_NO_PAIRS
)


@contextlib.contextmanager
def log_context(**pairs: Any) -> Iterator[None]:
    """Add key/value pairs to every line logged in this context (thread and task local)."""
    token = _context.set({**_context.get(), **pairs})
    try:
        yield
    finally:
        _context.reset(token)


class Logger:
    """``log.info("Assigned identity", node=n, identity=i)``: message plus structured pairs."""

    __slots__ = ("_logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    @property
    def name(self) -> str:
        return self._logger.name

    def _log(self, level: int, message: str, pairs: dict[str, Any], exc_info: bool = False) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(
                level, message, extra={"nodewright_pairs": pairs}, exc_info=exc_info, stacklevel=3
            )

    def debug(self, message: str, **pairs: Any) -> None:
        self._log(logging.DEBUG, message, pairs)

    def info(self, message: str, **pairs: Any) -> None:
        self._log(logging.INFO, message, pairs)

    def warning(self, message: str, **pairs: Any) -> None:
        self._log(logging.WARNING, message, pairs)

    def error(self, message: str, *, exc_info: bool = False, **pairs: Any) -> None:
        self._log(logging.ERROR, message, pairs, exc_info=exc_info)

    def exception(self, message: str, **pairs: Any) -> None:
        self._log(logging.ERROR, message, pairs, exc_info=True)


def get_logger(name: str) -> Logger:
    return Logger(logging.getLogger(name))


def record_pairs(record: logging.LogRecord) -> dict[str, Any]:
    """The context pairs and the call's own pairs of one record, the call's winning."""
    return {**_context.get(), **getattr(record, "nodewright_pairs", {})}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the pairs."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(record_pairs(record))
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines for terminals: ``LEVEL logger: Message key=value ...``."""

    def format(self, record: logging.LogRecord) -> str:
        pairs = " ".join(f"{k}={v}" for k, v in record_pairs(record).items())
        text = f"{record.levelname:<7} {record.name}: {record.getMessage()}"
        if pairs:
            text = f"{text} {pairs}"
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        return text


def configure(level: str = "info", fmt: str = "json") -> None:
    """Install one stderr handler on the root logger with the JSON or text formatter."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
