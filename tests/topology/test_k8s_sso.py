"""deploy/k8s-sso, the base with single sign-on through one OpenID provider: the client secret is a
file of the web pods only, the web pods alone may reach the provider's HTTPS port, and the settings
read the provider from the rendered config and the mounted secret."""

import pytest
import yaml

from chatsite import signon
from harness.processes import ROOT
from tests.topology.k8s import as_mounted, config, every_container, mounted_secrets, render, workloads
from tests.topology.test_k8s_network import egress_of

SECRET = "SSO_OIDC_KEYCLOAK_CLIENT_SECRET"


@pytest.fixture(scope="module")
def sso_objects() -> list[dict]:
    return [document for document in yaml.safe_load_all(render(ROOT / "deploy" / "k8s-sso")) if document]


def test_the_client_secret_is_a_file_of_the_web_pods_only(sso_objects):
    holders = {
        container["name"]
        for w, container in every_container(sso_objects)
        if SECRET in mounted_secrets(w, container)
    }
    assert holders == {"web"}
    web = next(container for w, container in every_container(sso_objects) if container["name"] == "web")
    assert {"name": f"{SECRET}_FILE", "value": f"/run/secrets/chat/{SECRET}"} in web["env"]


def test_the_web_pods_alone_may_reach_the_providers_https_port(sso_objects):
    reach = {
        component: ("any", "TCP", 443) in egress_of(sso_objects, component)
        for component in workloads(sso_objects)
    }
    # The router's 443 is the Kubernetes API's (its service discovery), there without single sign-on too.
    assert {component for component, allowed in reach.items() if allowed} == {"web", "router"}


def test_the_settings_read_the_provider_from_the_config_and_the_mounted_secret(
    sso_objects, tmp_path, monkeypatch
):
    mounted = as_mounted(sso_objects, "web", "web", tmp_path, **{SECRET: "from-the-secret-store"})
    for name, value in {**config(sso_objects), **mounted}.items():
        monkeypatch.setenv(name, value)
    products, apps = signon.oidc_providers(signon.group_map("SSO_GROUP_MAP", {}))
    assert apps[0]["secret"] == "from-the-secret-store"
    assert products["keycloak"]["server_url"] == "https://keycloak.example.com/realms/acme"
    assert products["keycloak"]["group_map"] == {"chat-admins": "staff", "llm-large": "large-model"}
