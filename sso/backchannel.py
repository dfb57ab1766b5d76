"""OpenID Connect back-channel logout: the provider tells this product, server to server, that a
user's session at the provider ended (OpenID Connect Back-Channel Logout 1.0).

The logout token is checked as strictly as an ID token (signature by the provider's published keys,
issuer, audience, times; sso.tokens) and by its own rules (the logout event, `sub` or `sid`, no
nonce), and taken once (its `jti`, in Redis). The sessions it names end: every session that sign-in
with that provider `sid` opened, or without a `sid` every session the provider opened for `sub`.
The login-change signal then makes the user's open chat sockets check their login again, and the
ended sessions' sockets close. A token whose events also carry RISC's `account-disabled` or
`account-purged` event says the account is gone: the same signal then revokes the user's API keys
(apitokens.signals), at once."""

import logging
import time
from importlib import import_module

from allauth.socialaccount.adapter import get_adapter
from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from requests import RequestException

import redisconn
from accounts.signals import login_changed
from redisconn import keys
from sso import tokens
from sso.models import SignIn
from sso.oidc import StrictAdapter

log = logging.getLogger(__name__)

ACCOUNT_GONE_EVENTS = (
    "https://schemas.openid.net/secevent/risc/event-type/account-disabled",
    "https://schemas.openid.net/secevent/risc/event-type/account-purged",
)
# How long a taken jti is remembered when the token has no `exp`.
JTI_MEMORY_SECONDS = 24 * 3600


def _refused(detail: str, status: int = 400) -> JsonResponse:
    # The body the specification names (an OAuth error) for the provider's logs.
    return JsonResponse({"error": "invalid_request", "error_description": detail}, status=status)


@csrf_exempt
@never_cache
@require_POST
def backchannel_logout(request: HttpRequest, provider_id: str) -> JsonResponse:
    if settings.SSO_PROVIDERS.get(provider_id, {}).get("protocol") != "oidc":
        return _refused("no such OpenID provider", status=404)
    raw = request.POST.get("logout_token", "")
    if not raw:
        return _refused("no logout_token")
    try:
        claims = logout_claims(request, provider_id, raw)
    except (tokens.TokenInvalid, RequestException) as exc:
        log.warning("back-channel logout from %s refused: %s", provider_id, exc)
        return _refused(str(exc))
    ended = end_sessions(
        provider_id,
        sub=str(claims.get("sub", "")),
        sid=str(claims.get("sid", "")),
        account_gone=any(event in claims["events"] for event in ACCOUNT_GONE_EVENTS),
    )
    log.info("back-channel logout from %s ended %d sessions", provider_id, ended)
    return JsonResponse({})


def logout_claims(request: HttpRequest, provider_id: str, raw: str) -> dict:
    """The claims of a valid logout token not taken before; TokenInvalid otherwise."""
    provider = get_adapter(request).get_provider(request, provider_id)
    adapter = StrictAdapter(request, provider_id)
    with get_adapter(request).get_requests_session() as session:
        claims = tokens.verify(
            raw,
            provider_id=provider_id,
            jwks_uri=adapter.openid_config["jwks_uri"],
            issuer=adapter.openid_config["issuer"],
            audience=provider.app.client_id,
            required=["iss", "aud", "iat", "jti", "events"],
            session=session,
        )
    tokens.check_logout_token(claims)
    memory = int(claims["exp"] - time.time()) + tokens.LEEWAY if "exp" in claims else JTI_MEMORY_SECONDS
    taken = redisconn.sync_client().set(
        keys.sso_logout_token(provider_id, str(claims["jti"])), 1, nx=True, ex=max(memory, 1)
    )
    if not taken:
        raise tokens.TokenInvalid("this logout token was used before")
    return claims


@transaction.atomic
def end_sessions(provider_id: str, *, sub: str, sid: str, account_gone: bool) -> int:
    """End the sessions the provider's logout names; how many ended."""
    user_id = (
        SocialAccount.objects.filter(provider=provider_id, uid=sub).values_list("user_id", flat=True).first()
        if sub
        else None
    )
    sign_ins = SignIn.objects.filter(provider_id=provider_id)
    if sid:
        sign_ins = sign_ins.filter(sid=sid)
    if user_id is not None:
        sign_ins = sign_ins.filter(user_id=user_id)
    elif not sid:
        return 0
    store = import_module(settings.SESSION_ENGINE).SessionStore
    ended = list(sign_ins.values_list("session_key", "user_id"))
    for session_key, _ in ended:
        store(session_key=session_key).delete()
    sign_ins.delete()
    for affected in {user for _, user in ended} | ({user_id} if user_id is not None else set()):
        # The sockets check their login again (chat.signals); the keys stay unless the account is gone.
        login_changed.send(
            sender=get_user_model(), user_id=affected, deleted=False, keys_kept=not account_gone
        )
    return len(ended)
