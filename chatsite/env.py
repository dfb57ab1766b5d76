"""Typed readers for environment variables.

Each fails loudly with the variable's name and the bad value, so a typo in a
deployment stops the process at start instead of surfacing later as odd behaviour.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: expected one of {sorted(_TRUE | _FALSE)}")


def _number(name: str, default, kind, minimum, maximum):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected {kind.__name__}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={raw!r}: must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={raw!r}: must be <= {maximum}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    return _number(name, default, int, minimum, maximum)


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    return _number(name, default, float, minimum, maximum)


def env_choice(name: str, default: str, choices: set[str]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected one of {sorted(choices)}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_file(name: str) -> str:
    """The text of the file the variable names, stripped; empty when the variable is unset.

    For secrets kept in a file (`make run`'s generated key, a mounted secret): a file that
    cannot be read, or is empty, stops the process, since a missing secret must never fall
    back to a default."""
    path = os.environ.get(name)
    if not path:
        return ""
    try:
        text = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = (exc.strerror if isinstance(exc, OSError) else None) or type(exc).__name__
        raise ImproperlyConfigured(f"{name}={path!r}: cannot read it ({reason})") from None
    if not text:
        raise ImproperlyConfigured(f"{name}={path!r}: the file is empty")
    return text


def web_drain_seconds() -> float:
    """WEB_DRAIN_SECONDS (answers.drain): read by the settings, and by deploy/, which renders
    supervisord's wait from it without the settings."""
    return env_float("WEB_DRAIN_SECONDS", 30.0, minimum=0.0)
