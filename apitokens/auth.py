"""Who is asking: a session, or an `Authorization: Bearer` API token with a scope.

A user who signs in through an identity provider (single sign-on, sso/) keeps working keys only while
they keep signing in: past SSO_KEY_MAX_IDLE since their last sign-in with any provider, their keys
are refused, so a person who left the organisation and never signs in again loses the API too."""

import hmac
from datetime import timedelta

from allauth.socialaccount.models import SocialAccount
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Max
from django.http import HttpRequest
from django.utils import timezone

from apitokens.models import ApiToken
from apitokens.services import TOKEN_PREFIX, token_digest


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header (maybe empty); None without one."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


class TokenRefused(Exception):
    """A bearer token that does not let its holder in: `missing_scope` when it is valid but
    lacks the scope asked for (403), `invalid` otherwise (401)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def token_user(raw: str, scope: str) -> AbstractBaseUser:
    """The active user a valid, live token with `scope` belongs to; TokenRefused otherwise."""
    kind, _, rest = raw.partition("_")
    prefix, _, secret = rest.partition("_")
    if kind != TOKEN_PREFIX or not prefix or not secret:
        raise TokenRefused("invalid")
    token = ApiToken.objects.select_related("user").filter(prefix=prefix, revoked_at=None).first()
    if token is None or not hmac.compare_digest(token.digest, token_digest(secret)):
        raise TokenRefused("invalid")
    if not token.user.is_active or lapsed(token.user):
        raise TokenRefused("invalid")
    if scope not in token.scopes:
        raise TokenRefused("missing_scope")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    return token.user


def lapsed(user: AbstractBaseUser) -> bool:
    """Whether the user signs in through a provider and has not for SSO_KEY_MAX_IDLE."""
    if not settings.SSO_KEY_MAX_IDLE:
        return False
    last = SocialAccount.objects.filter(user=user).aggregate(last=Max("last_login"))["last"]
    return last is not None and last < timezone.now() - timedelta(seconds=settings.SSO_KEY_MAX_IDLE)


def user_for_token(raw: str, scope: str) -> AbstractBaseUser | None:
    """The active user a token belongs to, if the token is valid, live and has `scope`."""
    try:
        return token_user(raw, scope)
    except TokenRefused:
        return None


def user_for_request(request: HttpRequest, scope: str) -> AbstractBaseUser | None:
    """The requesting user: by bearer token when one is sent (a bad one is never
    replaced by the session), otherwise by session."""
    raw = bearer_token(request)
    if raw is not None:
        return user_for_token(raw, scope)
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


async def auser_for_request(request: HttpRequest, scope: str) -> AbstractBaseUser | None:
    raw = bearer_token(request)
    if raw is not None:
        return await sync_to_async(user_for_token)(raw, scope)
    user = await request.auser()
    return user if user.is_authenticated else None
