"""SAML providers read from the environment (chatsite/signon_saml.py): a metadata file as well as a
URL, the product's key and certificate from files, and a misconfiguration stopping the process with
the variable's name."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from chatsite import signon_saml
from tests.support.saml_idp import SamlIdP
from tests.support.saml_keys import write_key_pair


@pytest.fixture
def idp_metadata(tmp_path):
    path = tmp_path / "idp-metadata.xml"
    path.write_text(SamlIdP(tmp_path).metadata())
    return path


def providers(monkeypatch, **variables: str):
    monkeypatch.setenv("SSO_SAML_PROVIDERS", "corp")
    for name, value in variables.items():
        monkeypatch.setenv(f"SSO_SAML_CORP_{name}", value)
    return signon_saml.saml_providers({})


def test_it_reads_a_metadata_file_and_the_key_pair_from_files(monkeypatch, tmp_path, idp_metadata):
    key, cert = write_key_pair(tmp_path, "sp")
    products, apps = providers(
        monkeypatch,
        METADATA_FILE=str(idp_metadata),
        SP_PRIVATE_KEY_FILE=str(key),
        SP_CERTIFICATE_FILE=str(cert),
    )
    assert products["corp"]["metadata_url"] == idp_metadata.as_uri()
    assert products["corp"]["sso_origin"].startswith("http://127.0.0.1:")
    assert products["corp"]["emails_trusted"] is False
    advanced = apps[0]["settings"]["advanced"]
    assert advanced["private_key"] == key.read_text().strip() and advanced["authn_request_signed"]
    assert advanced["want_assertion_signed"] and advanced["reject_idp_initiated_sso"] and advanced["strict"]


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({}, "SSO_SAML_CORP_METADATA_URL"),
        (
            {"METADATA_URL": "https://idp.example.com/m", "METADATA_FILE": "/etc/m.xml"},
            "SSO_SAML_CORP_METADATA_FILE",
        ),
        ({"METADATA_URL": "ftp://idp.example.com/m"}, "SSO_SAML_CORP_METADATA_URL"),
        ({"METADATA_FILE": "/no/such/file.xml"}, "SSO_SAML_CORP_METADATA_FILE"),
        (
            {"METADATA_URL": "https://idp.example.com/m", "SP_PRIVATE_KEY": "k"},
            "SSO_SAML_CORP_SP_CERTIFICATE",
        ),
    ],
)
def test_a_misconfigured_provider_stops_the_process_with_the_variables_name(monkeypatch, variables, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        providers(monkeypatch, **variables)


def test_a_file_that_is_not_an_identity_providers_metadata_is_refused(monkeypatch, tmp_path):
    (tmp_path / "m.xml").write_text("<html/>")
    with pytest.raises(ImproperlyConfigured, match="not an identity provider's SAML metadata"):
        providers(monkeypatch, METADATA_FILE=str(tmp_path / "m.xml"))
