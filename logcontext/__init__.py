"""Request, conversation and message ids on every log record.

The ids live in context variables, so they follow the code that set them: an HTTP
request (request_id_middleware) or one answer's generation task (`bind_log_context`
at its start; asyncio gives each task its own copy of the context). `ContextFilter`
copies them onto each record, and both formatters print them.
"""

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

LOG_IDS = ("request_id", "conversation_id", "message_id")
_ids: dict[str, ContextVar] = {name: ContextVar(name, default=None) for name in LOG_IDS}


def bind_log_context(**ids: object) -> None:
    """Set ids for the rest of the current task or request (`request_id=...`, `message_id=...`)."""
    for name, value in ids.items():
        _ids[name].set(value)


@contextmanager
def scoped_log_context(**ids: object) -> Iterator[None]:
    """Set ids for the body of a `with` block only (a request on a reused thread)."""
    tokens = [(_ids[name], _ids[name].set(value)) for name, value in ids.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def log_context() -> dict[str, object]:
    return {name: var.get() for name, var in _ids.items()}


def new_request_id() -> str:
    return uuid.uuid4().hex


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in log_context().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class PlainFormatter(logging.Formatter):
    """Human-readable lines, with the ids that are set appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{n}={getattr(record, n)}" for n in LOG_IDS if getattr(record, n, None) is not None)
        return f"{line} [{ids}]" if ids else line


class JsonFormatter(_JsonFormatter):
    """One JSON object per line, ids as fields (null when not set), for log shippers."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )

    def add_fields(self, log_record: dict, record: logging.LogRecord, message_dict: dict) -> None:
        super().add_fields(log_record, record, message_dict)
        for name in LOG_IDS:
            log_record[name] = getattr(record, name, None)
