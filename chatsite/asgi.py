"""ASGI entry point served by daphne: HTTP through Django, WebSockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
http_application = get_asgi_application()


def pool_database_connections() -> None:
    """PostgreSQL connections from a pool in the web process. Under ASGI each ORM call runs
    through sync_to_async and Django closes its connection after it, so without a pool every call
    opened a new connection (4.4 ms, docs/benchmarks.md). Django's pool (psycopg_pool) hands a
    connection back instead and checks it before lending it again, so connections the server
    dropped (a restart, a failover) are replaced, not used. Only here: the Celery workers fork,
    and a pool must not be shared across a fork; they keep a connection per task."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("postgresql") and settings.DATABASE_POOL_SIZE:
        database.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": settings.DATABASE_POOL_SIZE,
            # A request waits this long for a free connection, then fails with an error.
            "timeout": 10,
        }
        database["CONN_HEALTH_CHECKS"] = True


pool_database_connections()

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
