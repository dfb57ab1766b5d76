"""ASGI entry point served by daphne: HTTP through Django, WebSockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
http_application = get_asgi_application()


def reuse_database_connections() -> None:
    """Database connections the web process reuses. Under ASGI each ORM call runs through
    sync_to_async and Django closes its connection after it, so every call opened a new one.

    PostgreSQL: from a pool (4.4 ms a connection without one, docs/benchmarks.md). Django's pool
    (psycopg_pool) hands a connection back instead and checks it before lending it again, so
    connections the server dropped (a restart, a failover) are replaced, not used. Only here: the
    Celery workers fork, and a pool must not be shared across a fork; they keep a connection per task.

    SQLite: kept open (CONN_MAX_AGE None). Opening one (the file, the WAL and synchronous pragmas)
    cost about 1 ms, three times an answer (the socket's login check and the turn before the first
    token, the answer's row after), in the one thread that runs the chat's database calls, where a
    burst of messages queues (`chat_turn_store_seconds`). An HTTP request's calls run in a thread of
    their own that ends with it, and its connection with the thread."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        database["CONN_MAX_AGE"] = None
    if database["ENGINE"].endswith("postgresql") and settings.DATABASE_POOL_SIZE:
        database.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": settings.DATABASE_POOL_SIZE,
            # A request waits this long for a free connection, then fails with an error.
            "timeout": 10,
        }
        database["CONN_HEALTH_CHECKS"] = True


reuse_database_connections()

# Imported after Django is set up: the routing pulls in models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from frontend.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
