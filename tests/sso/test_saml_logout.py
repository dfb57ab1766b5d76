"""SAML single logout: the identity provider's signed LogoutRequest, carried by the browser to the
product's single logout service, ends every session that provider opened for the user (in this
browser and any other); an unsigned one, or one signed by another key, ends none."""

from urllib.parse import urlsplit

import pytest

from tests.support import saml as support
from tests.support.saml import HOST, product_client, sign_in

saml, saml_idp = support.saml, support.saml_idp
SP_ENTITY_ID = f"http://{HOST}/accounts/saml/acme/metadata/"


def signed_in_twice(idp):
    browsers = [product_client(), product_client()]
    for browser in browsers:
        assert sign_in(browser, "carol", "carol-pw").status_code == 302
        assert browser.get("/").wsgi_request.user.is_authenticated
    return browsers


def carry(browser, url: str):
    parts = urlsplit(url)
    return browser.get(f"{parts.path}?{parts.query}")


def test_a_signed_logout_request_ends_the_users_sessions_in_every_browser(saml):
    here, elsewhere = signed_in_twice(saml)
    response = carry(here, saml.logout_url("carol", SP_ENTITY_ID))
    assert response.status_code == 302
    assert response["Location"].startswith(saml.base + "/slo/redirect?SAMLResponse=")
    assert not here.get("/").wsgi_request.user.is_authenticated
    assert not elsewhere.get("/").wsgi_request.user.is_authenticated


@pytest.mark.parametrize("how", ["unsigned", "forged"])
def test_an_unsigned_or_forged_logout_request_ends_nothing(saml, how):
    here, elsewhere = signed_in_twice(saml)
    url = saml.logout_url("carol", SP_ENTITY_ID, signed=how != "unsigned", forged=how == "forged")
    response = carry(here, url)
    assert response.status_code == 400
    assert here.get("/").wsgi_request.user.is_authenticated
    assert elsewhere.get("/").wsgi_request.user.is_authenticated
