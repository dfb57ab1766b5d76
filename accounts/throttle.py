"""Login throttling: attempts per username and per client address, counted in Redis.

Both the site's login form and the admin's are covered. Every login POST is one hit in a
moving window per username and per address, taken before the password is checked; the
hit and the test are one atomic step in Redis (the `limits` moving window), so a
parallel burst gets no more tries than a sequence. Once either window is full, attempts
are refused with 429, so a correct password does not get through either. A successful
login clears its username's window, never the address's: logging in to one's own
account must not reset the count of an address that guesses at others. Redis down means
login fails loudly, not unthrottled.

The username is counted as authentication reads it (NFKC, as Django's login form
normalises it, then case-folded), so look-alikes such as full-width letters count for
the account they log in to. The address is the peer's, or, from a proxy listed in
TRUSTED_PROXIES, the client it names in X-Forwarded-For; an IPv6 client counts as its /64,
which one machine usually holds whole.
"""

import hashlib
import ipaddress
import time
import unicodedata
from functools import cache

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.decorators import sync_and_async_middleware
from limits import RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter

import redisconn
from redisconn import keys

NAMESPACE = keys.LOGIN_FAILURES_LIMIT


@cache
def _limiter() -> MovingWindowRateLimiter:
    return MovingWindowRateLimiter(RedisStorage(redisconn.limits_storage_uri(asynchronous=False)))


def _windows(username: str, address: str) -> list[tuple[RateLimitItemPerSecond, tuple[str, str]]]:
    window = settings.LOGIN_THROTTLE_SECONDS
    # Hashed: the key never holds a raw, attacker-chosen string.
    name = hashlib.sha256(normalize_username(username).encode()).hexdigest()
    return [
        (RateLimitItemPerSecond(settings.LOGIN_FAILURES_PER_USERNAME, window), ("user", name)),
        (RateLimitItemPerSecond(settings.LOGIN_FAILURES_PER_IP, window), ("ip", address)),
    ]


def normalize_username(username: str) -> str:
    """The account a username logs in to, as the login form reads it (NFKC, stripped), case-folded."""
    return unicodedata.normalize("NFKC", username).strip().casefold()


def _trusted_proxies() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in settings.TRUSTED_PROXIES)


def _parsed(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value.strip())
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str:
    """The client's address as counted: the peer, or the client a trusted proxy names; an
    IPv6 address as its /64."""
    peer = _parsed(request.META.get("REMOTE_ADDR") or "")
    trusted = _trusted_proxies()
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if peer is not None and forwarded and any(peer in network for network in trusted):
        # Right to left: the nearest hop a trusted proxy did not add is the client.
        for hop in reversed(forwarded.split(",")):
            address = _parsed(hop)
            if address is None:
                break
            peer = address
            if not any(address in network for network in trusted):
                break
    if peer is None:
        return "unknown"
    if peer.version == 6:
        return str(ipaddress.ip_network(f"{peer}/64", strict=False))
    return str(peer)


def attempt(*, username: str, address: str) -> float:
    """Count one login attempt; 0 when it may go on, else the seconds until it may."""
    limiter = _limiter()
    wait = 0.0
    for item, key in _windows(username, address):
        if not limiter.hit(item, NAMESPACE, *key):
            stats = limiter.get_window_stats(item, NAMESPACE, *key)
            wait = max(wait, stats.reset_time - time.time(), 1.0)
    return wait


def clear_username(*, username: str) -> None:
    item, key = _windows(username, "")[0]
    _limiter().clear(item, NAMESPACE, *key)


@cache
def _login_paths() -> frozenset[str]:
    return frozenset({reverse("login"), reverse("admin:login")})


@sync_and_async_middleware
def login_throttle_middleware(get_response):
    """Count a login POST, and refuse it with 429 while its username or address is throttled.

    Sync and async capable, like the rest of the stack, so the async chat views are not
    pushed through a thread by it."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            refusal = await sync_to_async(_refusal)(request)
            return refusal or await get_response(request)

    else:

        def middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or get_response(request)

    return middleware


def _refusal(request: HttpRequest) -> HttpResponse | None:
    if request.method != "POST" or request.path_info not in _login_paths():
        return None
    wait = attempt(username=request.POST.get("username", ""), address=client_address(request))
    if not wait:
        return None
    context = {"minutes": max(1, round(wait / 60)), "login_url": request.path_info}
    response = TemplateResponse(request, "accounts/throttled.html", context, status=429)
    response["Retry-After"] = str(int(wait) + 1)
    return response.render()


@receiver(user_logged_in)
def forget_failed_logins(sender, request: HttpRequest | None, user, **kwargs) -> None:
    if request is not None:
        clear_username(username=user.get_username())
