"""Who may read the monitoring details (/metrics, and what /healthz says beyond its status).

- Whoever sends `Authorization: Bearer <MONITORING_METRICS_TOKEN>` (a scraper, a probe), or a
  staff session.
- Without a token configured: in development (DEBUG on) any caller; in production only callers
  from a private or loopback address, as Prometheus inside the cluster is. The address is the
  client's as accounts.throttle reads it, so behind a proxy in TRUSTED_PROXIES a public client
  is seen as public.
"""

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest

from accounts.throttle import client_address
from apitokens.auth import bearer_token


def by_token(request: HttpRequest) -> bool | None:
    """True or False when a token is configured (whether the request sent it); None when none is."""
    token = settings.MONITORING_METRICS_TOKEN
    if not token:
        return None
    return hmac.compare_digest((bearer_token(request) or "").encode(), token.encode())


def from_private_address(request: HttpRequest) -> bool:
    address = client_address(request)
    try:
        network = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return False
    return network.is_private or network.is_loopback


def may_read_metrics(request: HttpRequest) -> bool:
    allowed = by_token(request)
    if allowed is not None:
        return allowed
    return settings.DEBUG or from_private_address(request)


def may_read_health_details(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return True
    allowed = by_token(request)
    if allowed is not None:
        return allowed
    return settings.DEBUG or from_private_address(request)
