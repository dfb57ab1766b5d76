import hashlib
import secrets
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from apitokens.models import BATCH_PERMISSION, ApiToken, Scope

TOKEN_PREFIX = "chat"


class KeyRefused(ValueError):
    """A key that may not be made; the message says why."""


class InvalidScope(KeyRefused):
    pass


def token_digest(secret: str) -> str:
    # Tokens carry 256 random bits, so a plain SHA-256 is enough: nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


def token_issue(*, user: AbstractBaseUser, scopes: Iterable[str], name: str = "") -> tuple[ApiToken, str]:
    """Create a token; return the row and the plain token, which is not kept anywhere."""
    scopes = sorted(set(scopes))
    unknown = [s for s in scopes if s not in Scope.values]
    if unknown or not scopes:
        raise InvalidScope(f"scopes must be some of {Scope.values}, got {scopes}")
    if Scope.JOBS_SUBMIT in scopes and not user.is_staff:
        raise InvalidScope("only staff may hold the jobs.submit scope")
    if Scope.BATCH in scopes and not user.has_perm(BATCH_PERMISSION):
        raise InvalidScope("the batch scope is for the groups staff grant it to")
    # A session alone (no password asked) may make keys: a stolen session must not mint them without end.
    held = ApiToken.objects.filter(user=user, revoked_at=None).count()
    if held >= settings.API_KEYS_MAX_PER_USER:
        raise KeyRefused(f"you hold {held} live keys, the most one user may; revoke one first")
    prefix = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=prefix, digest=token_digest(secret), scopes=scopes
    )
    return token, f"{TOKEN_PREFIX}_{prefix}_{secret}"


def tokens_revoke_all(*, user_id: int) -> int:
    """Revoke every live key of the user (their password changed, or they may no longer log in)."""
    return ApiToken.objects.filter(user_id=user_id, revoked_at=None).update(revoked_at=timezone.now())


def token_revoke(*, prefix: str, user: AbstractBaseUser | None = None) -> bool:
    """Revoke the token with this prefix (one of `user`'s, when given); False if there is no active one."""
    tokens = ApiToken.objects.filter(prefix=prefix, revoked_at=None)
    if user is not None:
        tokens = tokens.filter(user=user)
    return bool(tokens.update(revoked_at=timezone.now()))
