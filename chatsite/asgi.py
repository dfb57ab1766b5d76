"""ASGI entry point served by daphne: HTTP through Django, WebSockets through Channels, both behind
the process's bound on the handshakes and requests it has taken and not yet answered."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
http_application = get_asgi_application()


# Imported after Django is set up: the routing pulls in models.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from answers.metrics import admission_refused  # noqa: E402
from chat.protocol import refused  # noqa: E402
from chat.routing import websocket_urlpatterns  # noqa: E402
from chatsite.errors import json_body  # noqa: E402
from httpkit.pending import PendingBound  # noqa: E402
from httpkit.retryslots import RetrySlots, SharedRate  # noqa: E402
from httpkit.slottickets import SlotTickets  # noqa: E402
from redisconn import client as redis_client  # noqa: E402
from redisconn import keys  # noqa: E402


async def read_rate() -> float | None:
    rate = await redis_client().get(keys.WEB_PENDING_RATE)
    return float(rate) if rate else None


async def write_rate(rate: float) -> None:
    await redis_client().set(keys.WEB_PENDING_RATE, f"{rate:.3f}", ex=7 * 86400)


retry_slots = RetrySlots(first=settings.WEB_PENDING_RETRY_FIRST, rate=settings.WEB_PENDING_RATE_GUESS)
application = PendingBound(
    ProtocolTypeRouter(
        {
            "http": http_application,
            "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    ),
    limit=settings.WEB_MAX_PENDING,
    retry_slots=retry_slots,
    shared_rate=SharedRate(retry_slots, read=read_rate, write=write_rate),
    tickets=SlotTickets(settings.SECRET_KEY),
    socket_frame=refused,
    json_body=json_body,
    on_refused=admission_refused,
    # Never refused: probes (a busy process must not read as a dead one), and the page's own scripts
    # and styles where the web process serves them (a browser does not retry a refused script).
    exempt=("/healthz", "/metrics", "/" + settings.STATIC_URL.lstrip("/")),
)
