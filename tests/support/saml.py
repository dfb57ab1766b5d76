"""The SAML tests' identity provider and the product's settings pointing at it, and a sign-in driven
over HTTP as a browser drives it: the product (Django's test client, or a live server) sends the
user to the identity provider with an AuthnRequest; the provider (over HTTP) takes the password and
answers with a signed Response, which goes back to the product's assertion consumer service.

Two providers of the product use the one identity provider: `acme`, whose e-mail addresses are
not trusted, and `trusted`, whose are (SSO_SAML_<ID>_EMAILS_TRUSTED)."""

import json
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.test import Client

from chatsite import signon, signon_saml
from tests.support.saml_idp import SamlIdP, form_fields
from tests.support.saml_keys import write_key_pair

PROVIDERS = ("acme", "trusted")
# Provider group -> Django group, as SSO_GROUP_MAP says it.
GROUP_MAP = {"chat-admins": "staff", "researchers": "research"}
HOST = "localhost"


def product_variables(idp: SamlIdP, folder: Path) -> dict[str, str]:
    """The environment a product signing in with the test identity provider reads."""
    key, cert = write_key_pair(folder, "sp")
    variables = {
        "SSO_SAML_PROVIDERS": ",".join(PROVIDERS),
        "SSO_GROUP_MAP": json.dumps(GROUP_MAP),
        "SSO_STAFF_GROUPS": "staff",
    }
    for provider_id in PROVIDERS:
        var = lambda name, provider_id=provider_id: signon.variable(provider_id, name, "SAML")  # noqa: E731
        variables |= {
            var("NAME"): f"{provider_id.title()} SAML",
            var("METADATA_URL"): idp.entity_id,
            var("SP_PRIVATE_KEY_FILE"): str(key),
            var("SP_CERTIFICATE_FILE"): str(cert),
            var("EMAILS_TRUSTED"): "true" if provider_id == "trusted" else "false",
        }
    return variables


def product_settings(settings, monkeypatch, variables: dict[str, str]) -> None:
    """Django's settings as the product reads them from `variables` (chatsite/signon_saml.py)."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings.SSO_GROUP_MAP = signon.group_map("SSO_GROUP_MAP", {})
    settings.SSO_STAFF_GROUPS = ["staff"]
    settings.SSO_PROVIDERS, apps = signon_saml.saml_providers(settings.SSO_GROUP_MAP)
    settings.SOCIALACCOUNT_PROVIDERS = {
        **settings.SOCIALACCOUNT_PROVIDERS,
        "saml": {**settings.SOCIALACCOUNT_PROVIDERS["saml"], "APPS": apps},
    }


def trust_product(idp: SamlIdP, metadata: callable) -> None:
    """Give the identity provider the product's SP metadata, as each provider's /metadata/ serves it."""
    for provider_id in PROVIDERS:
        idp.trust_sp(metadata(f"/accounts/saml/{provider_id}/metadata/"))


def product_client() -> Client:
    return Client(HTTP_HOST=HOST)


def begin(client: Client, provider_id: str = "acme", next_url: str = "") -> str:
    """Press the login page's provider button; the identity provider's URL it leads to."""
    response = client.post(f"/accounts/saml/{provider_id}/login/", {"next": next_url} if next_url else {})
    assert response.status_code == 302, response.content[:500]
    return response["Location"]


def authenticate(idp_url: str, username: str, password: str) -> dict[str, str]:
    """Sign in at the identity provider (Redirect binding); the fields of the form it posts back."""
    query = {name: values[0] for name, values in parse_qs(urlsplit(idp_url).query).items()}
    with httpx.Client(timeout=30) as browser:
        form = browser.get(idp_url)
        assert form.status_code == 200, form.text[:300]
        answer = browser.post(
            idp_url.split("/sso/")[0] + "/login",
            data={
                **query,
                "binding": "urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect",
                "username": username,
                "password": password,
            },
        )
    assert answer.status_code == 200, answer.text[:300]
    return form_fields(answer.text)


def post_back(client: Client, fields: dict[str, str]):
    """Post the identity provider's Response to the product's ACS, as its page does; the product's
    last answer (a redirect into the product when the sign-in worked)."""
    acs = urlsplit(fields["action"]).path
    data = {name: fields[name] for name in ("SAMLResponse", "RelayState") if name in fields}
    response = client.post(acs, data)
    assert response.status_code == 302, response.content[:300]
    return client.get(response["Location"])


def sign_in(client: Client, username: str, password: str, provider_id: str = "acme"):
    return post_back(client, authenticate(begin(client, provider_id), username, password))


@contextmanager
def running_idp(folder: Path):
    """The test identity provider with its users, serving until the block ends."""
    idp = SamlIdP(folder)
    idp.add_user("carol", "carol-pw", "carol@example.com", ["researchers", "unmapped"])
    idp.add_user("dave", "dave-pw", "dave@example.com", ["chat-admins"])
    idp.add_user("mallory", "mallory-pw", "alice@example.com", [])
    idp.start()
    try:
        yield idp
    finally:
        idp.stop()


@pytest.fixture(scope="module")
def saml_idp(tmp_path_factory):
    """The identity provider, once per module (a test module imports this fixture)."""
    with running_idp(tmp_path_factory.mktemp("saml-idp")) as idp:
        idp.product_variables = product_variables(idp, tmp_path_factory.mktemp("saml-sp"))
        yield idp


@pytest.fixture
def saml(saml_idp, settings, monkeypatch, db):
    """The product (in the test's process) signing in with the test identity provider."""
    product_settings(settings, monkeypatch, saml_idp.product_variables)
    if not saml_idp.sp_metadata:
        client = product_client()
        trust_product(saml_idp, lambda path: client.get(path).content.decode())
    return saml_idp
