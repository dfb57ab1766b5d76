"""Signing in with a SAML identity provider in a real browser (Debian's Chromium), against daphne
serving the product and pysaml2's identity provider over HTTP: the login page's button, the
provider's form, its signed Response posted back, the chat with the user's groups mapped, its picker
without the model kept for a group the user is not in, whose conversation's message the socket
refuses; then the provider's single logout, in another tab, ends the session and closes the chat's
open socket."""

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

import redisconn
from conversations.models import Conversation
from harness.processes import daphne_running
from harness.waiting import wait_for
from inference.models import ModelAccess
from redisconn import keys
from tests.support import saml as support
from tests.support.browser import picker_models, send_refused, sign_in_at_provider
from tests.support.product import LOGS, product_env

pytestmark = pytest.mark.django_db(transaction=True)
saml_idp = support.saml_idp

# No answer is asked for: the sign-in, the page and its socket need no engine.
NO_ENGINE = "http://127.0.0.1:9"
# `large` is kept for the group researchers maps to.
MODELS = f"small={NO_ENGINE},large={NO_ENGINE}"


@pytest.fixture(scope="module")
def saml_product(django_db_setup, saml_idp):
    """daphne serving the product, signing in with the test identity provider, which trusts it."""
    env = product_env(NO_ENGINE, INFERENCE_MODELS=MODELS, **saml_idp.product_variables)
    with daphne_running(env, LOGS / "test-daphne-saml.log") as (base, _):
        support.trust_product(saml_idp, lambda path: httpx.get(base + path, timeout=30).text)
        yield base


def test_it_signs_in_at_the_identity_provider_refuses_another_groups_model_and_logs_out_the_socket(
    page, saml_product, saml_idp
):
    ModelAccess.objects.create(model_name="large").groups.add(Group.objects.create(name="research"))
    socket = sign_in_at_provider(
        page,
        saml_product,
        button="text=Sign in with Acme SAML",
        form_at=saml_idp.base + "/sso/redirect?SAMLRequest=",
        fields={"input[name=username]": "dave", "input[name=password]": "dave-pw"},
        submit="text=Sign in",
    )
    dave = get_user_model().objects.get(email="dave@example.com")
    assert set(dave.groups.values_list("name", flat=True)) == {"staff"} and dave.is_staff
    wait_for(
        lambda: redisconn.sync_client().zcard(keys.chat_user_sockets(dave.pk)) > 0, 30, "the chat socket"
    )
    assert not socket.is_closed()

    assert picker_models(page) == ["small"]
    kept = Conversation.objects.create(owner=dave, title="Research notes", model_name="large")
    socket = send_refused(page, saml_product, kept)

    # The user signs out at the identity provider, in another tab: it sends the browser to the
    # product's single logout service with its signed LogoutRequest.
    other_tab = page.context.new_page()
    sp_entity_id = saml_product + "/accounts/saml/acme/metadata/"
    with socket.expect_event("close", timeout=30_000):
        other_tab.goto(f"{saml_idp.base}/logout?username=dave&sp={sp_entity_id}")
    assert other_tab.url.startswith(saml_idp.base + "/slo/redirect?SAMLResponse=")
    # The page, told by the close (4401), goes to the login form; the session is gone.
    page.wait_for_url(saml_product + "/accounts/login/")
    page.goto(saml_product + "/")
    assert "/accounts/login/" in page.url
