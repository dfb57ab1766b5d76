"""Signing in with an OpenID provider in a real browser (Debian's Chromium), against daphne serving
the product and the test provider over HTTP: the user's groups mapped, the chat's picker offering
the model their group gives and not one kept for another group, whose conversation's message the
socket refuses; then the provider's back-channel logout closes the chat's open socket."""

import httpx
import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

import redisconn
from conversations.models import Conversation
from harness.processes import daphne_running
from harness.waiting import wait_for
from inference.models import ModelAccess
from redisconn import keys
from tests.sso.conftest import product_variables
from tests.support.browser import picker_models, send_refused, sign_in_at_provider
from tests.support.product import LOGS, product_env

pytestmark = pytest.mark.django_db(transaction=True)

# No answer is asked for: the sign-in, the page and its socket need no engine.
NO_ENGINE = "http://127.0.0.1:9"
# `large` is kept for the group llm-large maps to, `long` for another.
MODELS = f"small={NO_ENGINE},large={NO_ENGINE},long={NO_ENGINE}"


@pytest.fixture(scope="module")
def sso_product(django_db_setup, oidc_provider):
    """daphne serving the product, signing in with the test provider, on the port it knows."""
    env = product_env(NO_ENGINE, INFERENCE_MODELS=MODELS, **product_variables(oidc_provider))
    log = LOGS / "test-daphne-sso.log"
    with daphne_running(env, log, port=oidc_provider.browser_port) as (base, _):
        yield base


def test_it_signs_in_with_the_provider_offers_its_groups_models_and_a_backchannel_logout_closes_the_socket(
    page, sso_product, oidc_provider
):
    ModelAccess.objects.create(model_name="large").groups.add(Group.objects.create(name="large-model"))
    ModelAccess.objects.create(model_name="long").groups.add(Group.objects.create(name="heavy"))
    oidc_provider.set_user(
        "sam", password="pw-sam", email="sam@example.com", groups=["llm-large", "chat-admins"]
    )
    socket = sign_in_at_provider(
        page,
        sso_product,
        button="text=Sign in with Test provider",
        form_at=oidc_provider.base + "/login/",
        fields={"#provider-username": "sam", "#provider-password": "pw-sam"},
        submit="text=Sign in at the provider",
    )
    sam = get_user_model().objects.get(email="sam@example.com")
    assert set(sam.groups.values_list("name", flat=True)) == {"large-model", "staff"} and sam.is_staff
    account = SocialAccount.objects.get(user=sam)
    # The product took the socket: its lease is held for the user.
    wait_for(lambda: redisconn.sync_client().zcard(keys.chat_user_sockets(sam.pk)) > 0, 30, "the chat socket")
    assert not socket.is_closed()

    assert picker_models(page) == ["small", "large"]
    # A conversation of the model kept for a group sam is not in: the page's message is refused.
    kept = Conversation.objects.create(owner=sam, title="Long reports", model_name="long")
    socket = send_refused(page, sso_product, kept)

    with socket.expect_event("close", timeout=30_000):
        response = httpx.post(
            sso_product + "/accounts/oidc/test/backchannel-logout/",
            data={"logout_token": oidc_provider.logout_token(sub=account.uid)},
            timeout=30,
        )
        assert response.status_code == 200
    # The page, told by the close (4401), goes to the login form; the session is gone.
    page.wait_for_url(sso_product + "/accounts/login/")
    page.goto(sso_product + "/")
    assert "/accounts/login/" in page.url
