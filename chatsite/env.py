"""Typed readers for environment variables.

Each fails loudly with the variable's name and the bad value, so a typo in a
deployment stops the process at start instead of surfacing later as odd behaviour.
"""

import os
import secrets
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


def env_secret(name: str, default: str = "") -> str:
    """A secret: the variable itself, or the file that `NAME_FILE` names (a mounted secret, kept
    out of the environment that child processes and crash reports see); else `default`."""
    return os.environ.get(name) or env_file(f"{name}_FILE") or default


def private_secret(path: Path) -> str:
    """The secret kept in `path`, made once (random, mode 0600, its folder 0700) when missing.

    For what `make run` runs with nothing configured (the bundled Redis's password): every process
    of the install reads the same file, whichever starts first; the file appears whole or not at all."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_urlsafe(32) + "\n")
    try:
        os.link(draft, path)  # fails when another process made it first: theirs is kept
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path.read_text().strip()


def web_drain_seconds() -> float:
    """WEB_DRAIN_SECONDS (answers.drain): read by the settings, and by deploy/, which renders
    supervisord's wait from it without the settings."""
    return env_float("WEB_DRAIN_SECONDS", 30.0, minimum=0.0)
