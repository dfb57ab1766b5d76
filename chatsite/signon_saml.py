"""SAML 2.0 identity providers, read from the environment (docs/configuration.md, "Single sign-on").

`SSO_SAML_PROVIDERS` names them (`okta,entra`); each reads its own `SSO_SAML_<ID>_*` variables: the
identity provider's metadata (a URL, or a file), the product's own key and certificate (from files
in production), the attributes that carry the e-mail address and the groups, and whether the
provider's e-mail addresses may join existing local accounts. What no variable can loosen: every
assertion must be signed, a response must answer a request this site sent (no IdP-initiated
sign-in), and python3-saml checks audience, recipient, destination, issuer and validity in its
strict mode."""

from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from django.core.exceptions import ImproperlyConfigured
from onelogin.saml2.idp_metadata_parser import OneLogin_Saml2_IdPMetadataParser

from chatsite.env import env_bool, env_list, env_secret, env_str
from chatsite.signon import group_map, origin, provider_ids, variable

# mail (RFC 4524) by its OID, and the claim name Entra ID and ADFS send.
EMAIL_ATTRIBUTES = [
    "urn:oid:0.9.2342.19200300.100.1.3",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
]
FIRST_NAME_ATTRIBUTES = [
    "urn:oid:2.5.4.42",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/givenname",
]
LAST_NAME_ATTRIBUTES = ["urn:oid:2.5.4.4", "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/surname"]


def saml_providers(default_group_map: dict[str, str]) -> tuple[dict[str, dict], list[dict]]:
    """The SAML providers: their entries of SSO_PROVIDERS (what the product reads) and their apps as
    django-allauth reads them (SOCIALACCOUNT_PROVIDERS["saml"]["APPS"])."""
    products, apps = {}, []
    for provider_id in provider_ids("SSO_SAML_PROVIDERS"):
        var = lambda name, provider_id=provider_id: variable(provider_id, name, "SAML")  # noqa: E731
        metadata_url = _metadata_url(var("METADATA_URL"), var("METADATA_FILE"))
        key, cert = env_secret(var("SP_PRIVATE_KEY")).strip(), env_secret(var("SP_CERTIFICATE")).strip()
        if bool(key) != bool(cert):
            raise ImproperlyConfigured(
                f"{var('SP_PRIVATE_KEY')} and {var('SP_CERTIFICATE')} (or their _FILE forms) go together"
            )
        products[provider_id] = {
            "protocol": "saml",
            "name": env_str(var("NAME"), provider_id),
            "groups_attribute": env_str(var("GROUPS_ATTRIBUTE"), "groups"),
            "group_map": group_map(var("GROUP_MAP"), default_group_map),
            "emails_trusted": env_bool(var("EMAILS_TRUSTED"), False),
            "metadata_url": metadata_url,
            # Where the sign-in form's redirect goes (the Content-Security-Policy's form-action).
            "sso_origin": _sso_origin(metadata_url),
        }
        uid = env_list(var("UID_ATTRIBUTE"), [])
        advanced = {
            "strict": True,
            "want_assertion_signed": True,
            "reject_idp_initiated_sso": True,
            "reject_deprecated_algorithm": True,
            "authn_request_signed": bool(key),
        }
        if key:
            advanced.update(private_key=key, x509cert=cert)
        name_id_format = env_str(var("NAME_ID_FORMAT"), "")
        if name_id_format:
            advanced["name_id_format"] = name_id_format
        settings = {
            "idp": {"entity_id": env_str(var("IDP_ENTITY_ID"), "") or None, "metadata_url": metadata_url},
            "attribute_mapping": {
                **({"uid": uid} if uid else {}),
                "email": env_list(var("EMAIL_ATTRIBUTE"), EMAIL_ATTRIBUTES),
                "first_name": env_list(var("FIRST_NAME_ATTRIBUTE"), FIRST_NAME_ATTRIBUTES),
                "last_name": env_list(var("LAST_NAME_ATTRIBUTE"), LAST_NAME_ATTRIBUTES),
            },
            "advanced": advanced,
        }
        sp_entity_id = env_str(var("SP_ENTITY_ID"), "")
        if sp_entity_id:
            settings["sp"] = {"entity_id": sp_entity_id}
        apps.append(
            {
                "provider_id": provider_id,
                "name": products[provider_id]["name"],
                "client_id": provider_id,
                "settings": settings,
            }
        )
    return products, apps


def _metadata_url(url_name: str, file_name: str) -> str:
    """The identity provider's metadata: its URL, or a file as a file: URL (python3-saml reads both,
    and keeps the result for four hours)."""
    url, path = env_str(url_name, "").strip(), env_str(file_name, "").strip()
    if bool(url) == bool(path):
        raise ImproperlyConfigured(
            f"Give one of {url_name} and {file_name} for each provider SSO_SAML_PROVIDERS names"
        )
    if url:
        if not url.startswith(("https://", "http://")):
            raise ImproperlyConfigured(f"{url_name}={url!r}: expected the identity provider's metadata URL")
        return url
    file = Path(path)
    if not file.is_file():
        raise ImproperlyConfigured(f"{file_name}={path!r}: no such file")
    return file.resolve().as_uri()


def _sso_origin(metadata_url: str) -> str:
    """The origin of the provider's sign-in URL: a metadata file's own, read here; a metadata URL's
    host otherwise (the providers documented serve both from one host; nothing is fetched here)."""
    if not metadata_url.startswith("file:"):
        return origin(metadata_url)
    xml = Path(url2pathname(urlsplit(metadata_url).path)).read_text()
    try:
        idp = OneLogin_Saml2_IdPMetadataParser.parse(xml)["idp"]
        return origin(idp["singleSignOnService"]["url"])
    except Exception as exc:  # the parser raises bare Exceptions and KeyErrors
        raise ImproperlyConfigured(
            f"{metadata_url}: not an identity provider's SAML metadata ({exc})"
        ) from None
