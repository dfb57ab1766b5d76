"""The single sign-on tests' provider: django-oauth-toolkit's OpenID provider in a process of its
own, started once for the session (tests/support/oidc_provider/), and the product's settings
pointing at it."""

import json

import pytest

from chatsite import signon
from harness.processes import free_port
from tests.support.oidc_provider.harness import callback_url, running_provider
from tests.support.product import LOGS

# Provider group -> Django group, as SSO_GROUP_MAP says it.
GROUP_MAP = {"chat-admins": "staff", "llm-large": "large-model", "heavy-users": "heavy"}


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory):
    # The browser tests' product serves on a port chosen now: the provider knows its callback.
    browser_port = free_port()
    redirects = [callback_url("http://testserver"), callback_url(f"http://127.0.0.1:{browser_port}")]
    state = tmp_path_factory.mktemp("oidc-provider")
    with running_provider(state, redirects, LOGS / "test-oidc-provider.log") as provider:
        provider.browser_port = browser_port
        yield provider


def product_variables(provider) -> dict[str, str]:
    return provider.env(SSO_GROUP_MAP=json.dumps(GROUP_MAP), SSO_STAFF_GROUPS="staff")


@pytest.fixture
def sso(oidc_provider, settings, monkeypatch):
    """The product (in the test's process) signing in with the test provider."""
    for name, value in product_variables(oidc_provider).items():
        monkeypatch.setenv(name, value)
    settings.SSO_GROUP_MAP = signon.group_map("SSO_GROUP_MAP", {})
    settings.SSO_STAFF_GROUPS = ["staff"]
    settings.SSO_PROVIDERS, apps = signon.oidc_providers(settings.SSO_GROUP_MAP)
    settings.SOCIALACCOUNT_PROVIDERS = {
        "openid_connect": {**settings.SOCIALACCOUNT_PROVIDERS["openid_connect"], "APPS": apps}
    }
    return oidc_provider
