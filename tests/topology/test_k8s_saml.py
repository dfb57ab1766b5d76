"""deploy/k8s-saml, single sign-on with a SAML identity provider beside the OpenID one: the product's
private key for it is a file of the web pods only, and the settings read the provider from the
rendered config and the mounted files."""

import pytest
import yaml

from chatsite import signon_saml
from harness.processes import ROOT
from tests.support.saml_keys import write_key_pair
from tests.topology.k8s import as_mounted, config, every_container, mounted_secrets, render

KEY, CERT = "SSO_SAML_OKTA_SP_PRIVATE_KEY", "SSO_SAML_OKTA_SP_CERTIFICATE"


@pytest.fixture(scope="module")
def saml_objects() -> list[dict]:
    return [document for document in yaml.safe_load_all(render(ROOT / "deploy" / "k8s-saml")) if document]


def test_the_private_key_is_a_file_of_the_web_pods_only(saml_objects):
    holders = {c["name"] for w, c in every_container(saml_objects) if KEY in mounted_secrets(w, c)}
    assert holders == {"web"}
    web = next(c for w, c in every_container(saml_objects) if c["name"] == "web")
    assert {"name": f"{KEY}_FILE", "value": f"/run/secrets/chat/{KEY}"} in web["env"]
    assert all(variable["name"] != KEY for variable in web["env"]), "the key is never an environment variable"


def test_the_settings_read_the_provider_from_the_config_and_the_mounted_files(
    saml_objects, tmp_path, monkeypatch
):
    key, cert = write_key_pair(tmp_path, "sp")
    values = {KEY: key.read_text(), CERT: cert.read_text()}
    mounted = as_mounted(saml_objects, "web", "web", tmp_path / "mounted", **values)
    for name, value in {**config(saml_objects), **mounted}.items():
        monkeypatch.setenv(name, value)
    products, apps = signon_saml.saml_providers({})
    assert products["okta"]["metadata_url"] == "https://acme.okta.com/app/exk1a2b3c4/sso/saml/metadata"
    assert apps[0]["settings"]["advanced"]["private_key"] == key.read_text().strip()
    assert apps[0]["settings"]["advanced"]["x509cert"] == cert.read_text().strip()
