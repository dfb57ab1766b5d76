"""Single sign-on's providers, read from the environment (docs/configuration.md, "Single sign-on").

`SSO_OIDC_PROVIDERS` names the OpenID Connect providers (`keycloak,entra`); each reads its own
`SSO_OIDC_<ID>_*` variables, its client secret also from `SSO_OIDC_<ID>_CLIENT_SECRET_FILE`. A
missing or malformed value stops the process with the variable's name, as every reader here does.
"""

import json
import re
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from chatsite.env import env_bool, env_list, env_secret, env_str

PROVIDER_ID = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
# Asymmetric signatures only: "none" and the HMAC family (keyed with the client secret, which the
# provider and every client share) are never accepted for an ID token.
SIGNATURE_ALGORITHMS = {
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
}


def variable(provider_id: str, name: str, protocol: str = "OIDC") -> str:
    """The name of a provider's own variable: `SSO_OIDC_<ID>_<NAME>`."""
    return f"SSO_{protocol}_{provider_id.upper().replace('-', '_')}_{name}"


def provider_ids(name: str) -> list[str]:
    """The provider ids a list variable names, each checked."""
    ids = env_list(name, [])
    for provider_id in ids:
        if not PROVIDER_ID.match(provider_id):
            raise ImproperlyConfigured(
                f"{name}: {provider_id!r} is not a provider id (lower-case letters, digits and '-', "
                "starting with a letter)"
            )
    if len(set(ids)) != len(ids):
        raise ImproperlyConfigured(f"{name}: a provider id is named twice")
    return ids


def group_map(name: str, default: dict[str, str]) -> dict[str, str]:
    """A JSON object of provider group -> Django group names; `default` when the variable is unset."""
    raw = env_str(name, "")
    if not raw.strip():
        return dict(default)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name}: not JSON ({exc.msg})") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()
    ):
        raise ImproperlyConfigured(
            f"{name}: expected a JSON object of provider group names to Django group names, "
            '{"chat-admins": "staff"} for one'
        )
    return value


def _required(name: str, value: str) -> str:
    if not value:
        raise ImproperlyConfigured(f"{name} is required for each provider SSO_OIDC_PROVIDERS names")
    return value


def oidc_providers(default_group_map: dict[str, str]) -> tuple[dict[str, dict], list[dict]]:
    """The OpenID Connect providers: their entries of SSO_PROVIDERS (what the product reads) and
    their apps as django-allauth reads them (SOCIALACCOUNT_PROVIDERS["openid_connect"]["APPS"])."""
    products, apps = {}, []
    for provider_id in provider_ids("SSO_OIDC_PROVIDERS"):
        products[provider_id], app = _oidc_provider(provider_id, default_group_map)
        apps.append(app)
    return products, apps


def _oidc_provider(provider_id: str, default_group_map: dict[str, str]) -> tuple[dict, dict]:
    def var(name: str) -> str:
        return variable(provider_id, name)

    server_url = _required(var("SERVER_URL"), env_str(var("SERVER_URL"), "").strip().rstrip("/"))
    if not server_url.startswith(("https://", "http://")):
        raise ImproperlyConfigured(f"{var('SERVER_URL')}={server_url!r}: expected the issuer's URL")
    algorithms = env_list(var("ALGORITHMS"), ["RS256"])
    if not algorithms or set(algorithms) - SIGNATURE_ALGORITHMS:
        raise ImproperlyConfigured(
            f"{var('ALGORITHMS')}: expected some of {sorted(SIGNATURE_ALGORITHMS)} (never none or HS*)"
        )
    name = env_str(var("NAME"), provider_id)
    product = {
        "protocol": "oidc",
        "name": name,
        "groups_claim": env_str(var("GROUPS_CLAIM"), "groups"),
        "group_map": group_map(var("GROUP_MAP"), default_group_map),
        "algorithms": algorithms,
        "server_url": server_url,
    }
    app = {
        "provider_id": provider_id,
        "name": name,
        "client_id": _required(var("CLIENT_ID"), env_str(var("CLIENT_ID"), "")),
        # Empty for a public client (PKCE alone), and in the processes that sign nobody in (the
        # Celery workers mount no client secret, docs/deploy.md).
        "secret": env_secret(var("CLIENT_SECRET")),
        "settings": {
            "server_url": server_url,
            "oauth_pkce_enabled": True,
            "fetch_userinfo": env_bool(var("FETCH_USERINFO"), True),
            "scope": env_list(var("SCOPES"), ["openid", "profile", "email"]),
        },
    }
    return product, app


def origin(url: str) -> str:
    """scheme://host[:port] of a URL, as a Content-Security-Policy source."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
