"""Login throttling: failed attempts per username and per client address, counted in Redis.

Both the site's login form and the admin's are covered. A failed attempt (Django's
`user_login_failed`) is one hit in a moving window per username and per address; once
either is full, further attempts are refused with 429 before the password is checked,
so a correct password does not get through either. A successful login clears its
username's count, never the address's: logging in to one's own account must not
reset the count of an address that guesses at others. Redis down means login fails
loudly, not unthrottled.
"""

import hashlib
import time
from functools import cache

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
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


def _items() -> tuple[RateLimitItemPerSecond, RateLimitItemPerSecond]:
    window = settings.LOGIN_THROTTLE_SECONDS
    return (
        RateLimitItemPerSecond(settings.LOGIN_FAILURES_PER_USERNAME, window),
        RateLimitItemPerSecond(settings.LOGIN_FAILURES_PER_IP, window),
    )


def _keys(username: str, address: str) -> tuple[tuple[str, str], tuple[str, str]]:
    # Hashed: the key never holds a raw, attacker-chosen string.
    name = hashlib.sha256(username.strip().lower().encode()).hexdigest()
    return (("user", name), ("ip", address))


def client_address(request: HttpRequest) -> str:
    """The peer address; behind a proxy, daphne's --proxy-headers makes it the client's."""
    return request.META.get("REMOTE_ADDR") or "unknown"


def retry_after(*, username: str, address: str) -> float:
    """Seconds until this username and address may try again; 0 when they may now."""
    limiter = _limiter()
    wait = 0.0
    for item, key in zip(_items(), _keys(username, address), strict=True):
        if not limiter.test(item, NAMESPACE, *key):
            stats = limiter.get_window_stats(item, NAMESPACE, *key)
            wait = max(wait, stats.reset_time - time.time(), 1.0)
    return wait


def record_failure(*, username: str, address: str) -> None:
    limiter = _limiter()
    for item, key in zip(_items(), _keys(username, address), strict=True):
        limiter.hit(item, NAMESPACE, *key)


def clear_username(*, username: str) -> None:
    user_item, _ = _items()
    (user_key, _) = _keys(username, "")
    _limiter().clear(user_item, NAMESPACE, *user_key)


@cache
def _login_paths() -> frozenset[str]:
    return frozenset({reverse("login"), reverse("admin:login")})


@sync_and_async_middleware
def login_throttle_middleware(get_response):
    """Refuse a login POST with 429 while its username or address is throttled.

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
    wait = retry_after(username=request.POST.get("username", ""), address=client_address(request))
    if not wait:
        return None
    context = {"minutes": max(1, round(wait / 60)), "login_url": request.path_info}
    response = TemplateResponse(request, "accounts/throttled.html", context, status=429)
    response["Retry-After"] = str(int(wait) + 1)
    return response.render()


@receiver(user_login_failed)
def count_failed_login(sender, credentials: dict, request: HttpRequest | None = None, **kwargs) -> None:
    if request is not None:
        record_failure(username=str(credentials.get("username", "")), address=client_address(request))


@receiver(user_logged_in)
def forget_failed_logins(sender, request: HttpRequest | None, user, **kwargs) -> None:
    if request is not None:
        clear_username(username=user.get_username())
