"""Signing in with an OpenID provider (sso/): accounts made just in time, the provider's groups
mapped on every sign-in, and the rights the groups carry."""

from urllib.parse import parse_qs, urlsplit

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client

from inference.models import ModelAccess
from sso.models import GroupGrant, SignIn
from tests.support.api_keys import bearer
from tests.support.oidc_provider import flow

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_makes_the_account_at_the_first_sign_in(sso):
    sso.set_user("carol", password="pw-carol", email="carol@example.com", groups=["llm-large"])
    client = Client()
    response = flow.sign_in(client, "carol", "pw-carol")
    assert response.status_code == 302 and response["Location"] == "/"
    account = SocialAccount.objects.get(provider="test")
    user = account.user
    assert user.email == "carol@example.com"
    assert list(user.groups.values_list("name", flat=True)) == ["large-model"]
    assert client.get("/").status_code == 200
    assert int(client.session["_auth_user_id"]) == user.pk


def test_it_asks_with_pkce_state_and_a_nonce(sso):
    query = parse_qs(urlsplit(flow.begin(Client())).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) >= 43
    assert query["state"][0] and len(query["nonce"][0]) >= 32
    assert query["redirect_uri"] == ["http://testserver/accounts/oidc/test/login/callback/"]


def test_it_maps_groups_again_at_every_sign_in_and_keeps_those_given_by_hand(sso):
    sso.set_user("dave", password="pw-dave", email="dave@example.com", groups=["chat-admins", "llm-large"])
    flow.sign_in(Client(), "dave", "pw-dave")
    dave = get_user_model().objects.get(email="dave@example.com")
    assert set(dave.groups.values_list("name", flat=True)) == {"staff", "large-model"}
    assert dave.is_staff
    by_hand = Group.objects.create(name="reviewers")
    dave.groups.add(by_hand)

    sso.set_user("dave", password="pw-dave", email="dave@example.com", groups=["heavy-users", "unmapped"])
    flow.sign_in(Client(), "dave", "pw-dave")
    dave.refresh_from_db()
    assert set(dave.groups.values_list("name", flat=True)) == {"heavy", "reviewers"}
    assert not dave.is_staff
    assert set(GroupGrant.objects.filter(user=dave).values_list("group__name", flat=True)) == {"heavy"}


def test_staff_status_given_by_hand_stays(sso):
    sso.set_user("erin", password="pw-erin", email="erin@example.com", groups=[])
    flow.sign_in(Client(), "erin", "pw-erin")
    erin = get_user_model().objects.get(email="erin@example.com")
    erin.is_staff = True
    erin.save()
    flow.sign_in(Client(), "erin", "pw-erin")
    erin.refresh_from_db()
    assert erin.is_staff


def test_a_model_is_refused_to_a_user_outside_its_group(sso, settings):
    settings.INFERENCE_MODELS = "small=http://127.0.0.1:9,large=http://127.0.0.1:9"
    ModelAccess.objects.create(model_name="large").groups.add(Group.objects.create(name="large-model"))
    sso.set_user("frank", password="pw-frank", email="frank@example.com", groups=["llm-large"])
    sso.set_user("grace", password="pw-grace", email="grace@example.com", groups=[])
    flow.sign_in(Client(), "frank", "pw-frank")
    flow.sign_in(Client(), "grace", "pw-grace")
    frank = get_user_model().objects.get(email="frank@example.com")
    grace = get_user_model().objects.get(email="grace@example.com")

    listed = Client().get("/v1/models", headers=bearer(frank, "openai")).json()["data"]
    assert [model["id"] for model in listed] == ["small", "large"]
    refused = Client().post(
        "/v1/chat/completions",
        {"model": "large", "messages": [{"role": "user", "content": "hi"}]},
        content_type="application/json",
        headers=bearer(grace, "openai"),
    )
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"


def test_the_session_lives_at_most_sso_session_max_age_and_is_recorded(sso, settings):
    settings.SSO_SESSION_MAX_AGE = 600
    sso.set_user("heidi", password="pw-heidi", email="heidi@example.com")
    client = Client()
    flow.sign_in(client, "heidi", "pw-heidi")
    assert client.session.get_expiry_age() <= 600
    assert SignIn.objects.filter(session_key=client.session.session_key, provider_id="test").exists()


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/", "http:/\\evil.example"])
def test_next_never_leads_off_the_site(sso, target):
    sso.set_user("ivan", password="pw-ivan", email="ivan@example.com")
    response = flow.sign_in(Client(), "ivan", "pw-ivan", next_url=target)
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_next_on_the_site_is_followed(sso):
    sso.set_user("judy", password="pw-judy", email="judy@example.com")
    response = flow.sign_in(Client(), "judy", "pw-judy", next_url="/usage/")
    assert response["Location"] == "/usage/"
