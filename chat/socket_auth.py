"""Whether an open chat socket still speaks for its user.

The user is resolved once, at the handshake; this module keeps that answer true while
the socket stays open, in every web process. Each socket joins two groups: its login's
(a token kept in the session, which logging in again in the same browser keeps, so a
logout also closes the sockets opened before that login) and its user's. Logout closes
the login's group; deactivating, deleting or changing the password of a user asks the
user's group to check again; a socket also checks again when its session expires and
before every frame it acts on. A check fails when the session no longer logs this user
in: gone, expired, logged out, its password hash outdated, or the user inactive.
"""

import logging
import secrets
from datetime import datetime
from importlib import import_module
from types import SimpleNamespace

from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.contrib.sessions.backends.base import SessionBase
from django.utils import timezone
from redis.exceptions import RedisError

import redisconn
from chat import sockets

log = logging.getLogger(__name__)

LOGIN_GROUP_KEY = "socket_group"
CLOSE = "session.closed"
RECHECK = sockets.RECHECK
DATABASE_ENGINES = (
    "accounts.sessions",
    "django.contrib.sessions.backends.db",
    "django.contrib.sessions.backends.cached_db",
)


def login_group(session: SessionBase | None) -> str | None:
    if session is None:
        return None
    token = session.get(LOGIN_GROUP_KEY)
    if token:
        return f"login-{token}"
    # A session from before login groups: its key, which a new login changes.
    return f"session-{session.session_key}" if session.session_key else None


def user_group(user_id: int) -> str:
    return f"user-{user_id}"


def mark_login(session: SessionBase) -> None:
    """Give the browser's login its socket group; kept when the same browser logs in again."""
    session.setdefault(LOGIN_GROUP_KEY, secrets.token_urlsafe(16))


def _store(session_key: str) -> SessionBase:
    return import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)


def still_logged_in(user_id: int, session_key: str | None) -> bool:
    """Whether session `session_key` still logs user `user_id` in (sync: it reads the store)."""
    if session_key is None:  # a socket made in-process, without a session
        return get_user_model().objects.filter(pk=user_id, is_active=True).exists()
    # Django's own check: the session's user, its backend, is_active and the password hash.
    return get_user(SimpleNamespace(session=_store(session_key))).pk == user_id


class LoggedOut(Exception):
    """The socket's session no longer logs its user in: the socket closes with 4401."""


def known_expiry(session: SessionBase | None) -> datetime | None:
    """The expiry the session's own read found (accounts.sessions), if it was read: no new query."""
    return getattr(session, "expire_date", None)


def session_expiry(session_key: str | None) -> datetime | None:
    """When the session expires, as its store says (sync: it reads the store)."""
    if session_key is None:
        return None
    if settings.SESSION_ENGINE in DATABASE_ENGINES:
        from django.contrib.sessions.models import Session

        return Session.objects.filter(session_key=session_key).values_list("expire_date", flat=True).first()
    return _store(session_key).get_expiry_date()


def seconds_until(moment: datetime | None) -> float | None:
    return None if moment is None else max(0.0, (moment - timezone.now()).total_seconds())


def send(group: str | None, kind: str) -> None:
    """Tell a group's sockets, in every web process (chat.sockets). Without Redis, the change
    that asked it (a logout, a new password, a user made before Redis runs, as `make run` does)
    still happens: no socket hears it at once, and each still checks again before the next frame
    it acts on."""
    if not group:
        return
    try:
        sockets.publish(redisconn.sync_client(), group, kind)
    except (RedisError, OSError):
        log.warning("could not tell the sockets of %s to %s: Redis unavailable", group, kind)
