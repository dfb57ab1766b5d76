"""Signed JWTs from an OpenID provider: ID tokens and back-channel logout tokens.

Every token's signature is checked against the provider's published keys (its JWKS), with the
algorithms the provider's configuration allows (asymmetric only: never `none`, never HMAC), and its
issuer, audience and times; django-allauth's own check skips the signature of a token it fetched
itself, which this product does not (docs/security.md)."""

import json

import jwt
import requests
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from django.conf import settings

# Seconds of clock difference between the provider and this host that a token's times tolerate.
LEEWAY = 60
BACKCHANNEL_LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"


class TokenInvalid(OAuth2Error):
    """A token that does not prove what it says; the message says which check failed."""


def provider_keys(jwks_uri: str, session: requests.Session) -> list[dict]:
    response = session.get(jwks_uri, timeout=10)
    response.raise_for_status()
    keys = response.json().get("keys")
    if not isinstance(keys, list):
        raise TokenInvalid("the provider's JWKS has no keys")
    return keys


def verify(
    token: str,
    *,
    provider_id: str,
    jwks_uri: str,
    issuer: str,
    audience: str,
    required: list[str],
    session: requests.Session,
) -> dict:
    """The claims of `token` once its signature, algorithm, issuer, audience and times check out."""
    algorithms = settings.SSO_PROVIDERS[provider_id]["algorithms"]
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise TokenInvalid(f"not a JWT: {exc}") from None
    algorithm = header.get("alg")
    if algorithm not in algorithms:
        raise TokenInvalid(f"signature algorithm {algorithm!r} is not one of {algorithms}")
    candidates = [
        key
        for key in provider_keys(jwks_uri, session)
        if key.get("use", "sig") == "sig"
        and (header.get("kid") is None or key.get("kid") == header.get("kid"))
    ]
    if len(candidates) != 1:
        raise TokenInvalid(f"no single signing key of the provider has kid {header.get('kid')!r}")
    try:
        key = jwt.PyJWK(candidates[0], algorithm=algorithm).key
        return jwt.decode(
            token,
            key=key,
            algorithms=[algorithm],
            audience=audience,
            issuer=issuer,
            leeway=LEEWAY,
            options={"require": required, "verify_signature": True},
        )
    except (jwt.PyJWTError, json.JSONDecodeError, ValueError) as exc:
        raise TokenInvalid(f"token refused: {exc}") from None


def check_id_token(claims: dict, *, audience: str, nonce: str | None) -> dict:
    """An ID token's claims beyond the signature: the nonce this sign-in sent, and `azp` when the
    token names several audiences."""
    if not nonce or claims.get("nonce") != nonce:
        raise TokenInvalid("the ID token's nonce is not the one this sign-in sent")
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != audience:
        raise TokenInvalid("the ID token names several audiences and another party as azp")
    return claims


def check_logout_token(claims: dict) -> dict:
    """A back-channel logout token's own rules (OpenID Connect Back-Channel Logout 1.0, 2.6): the
    logout event, a `sub` or a `sid`, and no nonce (which would make it pass for an ID token)."""
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(BACKCHANNEL_LOGOUT_EVENT), dict):
        raise TokenInvalid("the logout token carries no back-channel logout event")
    if not claims.get("sub") and not claims.get("sid"):
        raise TokenInvalid("the logout token names neither sub nor sid")
    if "nonce" in claims:
        raise TokenInvalid("a logout token must not carry a nonce")
    return claims
