"""Leaving: the provider's back-channel logout ends the sessions it names (and only after its token
checks out), an account the provider says is gone loses its API keys at once, and an SSO user's keys
lapse after SSO_KEY_MAX_IDLE without a sign-in (docs/security.md)."""

from datetime import timedelta

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apitokens.models import ApiToken
from sso.backchannel import ACCOUNT_GONE_EVENTS
from sso.models import SignIn
from tests.support.api_keys import bearer
from tests.support.oidc_provider import flow
from tests.support.oidc_provider.harness import BACKCHANNEL_LOGOUT_EVENT, new_rsa_key

pytestmark = pytest.mark.django_db(transaction=True)
LOGOUT = "/accounts/oidc/test/backchannel-logout/"


def signed_in(sso, username: str) -> tuple[Client, SocialAccount]:
    sso.set_user(username, password=f"pw-{username}", email=f"{username}@example.com")
    client = Client()
    assert flow.sign_in(client, username, f"pw-{username}").status_code == 302
    return client, SocialAccount.objects.get(user__email=f"{username}@example.com")


def logged_in(client: Client) -> bool:
    return client.get("/usage/").status_code == 200


def post_logout(token: str, provider_id: str = "test"):
    return Client().post(f"/accounts/oidc/{provider_id}/backchannel-logout/", {"logout_token": token})


def test_a_logout_ends_every_session_the_provider_opened_for_the_user(sso):
    first, account = signed_in(sso, "kate")
    second = Client()
    flow.sign_in(second, "kate", "pw-kate")
    other, _ = signed_in(sso, "leo")
    response = post_logout(sso.logout_token(sub=account.uid))
    assert response.status_code == 200
    assert not logged_in(first) and not logged_in(second)
    assert logged_in(other)
    assert not SignIn.objects.filter(user=account.user).exists()


def test_a_logout_naming_a_sid_ends_that_sign_in_only(sso):
    first, account = signed_in(sso, "mia")
    second = Client()
    flow.sign_in(second, "mia", "pw-mia")
    SignIn.objects.filter(session_key=first.session.session_key).update(sid="provider-session-1")
    assert post_logout(sso.logout_token(sub=account.uid, sid="provider-session-1")).status_code == 200
    assert not logged_in(first)
    assert logged_in(second)


def test_a_plain_logout_keeps_the_keys_and_an_account_gone_revokes_them(sso):
    client, account = signed_in(sso, "ned")
    headers = bearer(account.user, "openai")
    post_logout(sso.logout_token(sub=account.uid))
    assert Client().get("/v1/models", headers=headers).status_code == 200
    flow.sign_in(client, "ned", "pw-ned")
    gone = {BACKCHANNEL_LOGOUT_EVENT: {}, ACCOUNT_GONE_EVENTS[1]: {}}
    assert post_logout(sso.logout_token(sub=account.uid, events=gone)).status_code == 200
    assert Client().get("/v1/models", headers=headers).status_code == 401
    assert not ApiToken.objects.filter(user=account.user, revoked_at=None).exists()
    assert not logged_in(client)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda sso, sub: sso.logout_token(sub=sub, nonce="n"), id="nonce"),
        pytest.param(lambda sso, sub: sso.logout_token(sub=sub, events={}), id="no-event"),
        pytest.param(lambda sso, sub: sso.logout_token(), id="neither-sub-nor-sid"),
        pytest.param(lambda sso, sub: sso.logout_token(sub=sub, aud="another-client"), id="audience"),
        pytest.param(lambda sso, sub: sso.logout_token(sub=sub, iss="http://127.0.0.1:9/o"), id="issuer"),
        pytest.param(lambda sso, sub: sso.logout_token(sub=sub, iat=None), id="no-iat"),
        pytest.param(
            lambda sso, sub: sso.sign(
                {"sub": sub, "events": {BACKCHANNEL_LOGOUT_EVENT: {}}}, key=new_rsa_key()
            ),
            id="forged",
        ),
        pytest.param(
            lambda sso, sub: sso.sign(
                {
                    "iss": sso.issuer,
                    "aud": sso.client_id,
                    "sub": sub,
                    "events": {BACKCHANNEL_LOGOUT_EVENT: {}},
                },
                key=None,
                algorithm="none",
            ),
            id="unsigned",
        ),
    ],
)
def test_a_bad_logout_token_ends_nothing(sso, bad):
    client, account = signed_in(sso, "olga")
    response = post_logout(bad(sso, account.uid))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert logged_in(client)


def test_a_logout_token_is_taken_once(sso):
    first, account = signed_in(sso, "pia")
    token = sso.logout_token(sub=account.uid)
    assert post_logout(token).status_code == 200
    second = Client()
    flow.sign_in(second, "pia", "pw-pia")
    assert post_logout(token).status_code == 400
    assert logged_in(second)


def test_a_logout_for_no_such_provider_is_not_found(sso):
    assert post_logout("x.y.z", provider_id="nobody").status_code == 404


def test_an_sso_users_keys_lapse_after_sso_key_max_idle_without_a_sign_in(sso, settings):
    client, account = signed_in(sso, "quinn")
    headers = bearer(account.user, "openai")
    assert Client().get("/v1/models", headers=headers).status_code == 200
    SocialAccount.objects.filter(pk=account.pk).update(
        last_login=timezone.now() - timedelta(seconds=settings.SSO_KEY_MAX_IDLE + 60)
    )
    assert Client().get("/v1/models", headers=headers).status_code == 401
    flow.sign_in(Client(), "quinn", "pw-quinn")
    assert Client().get("/v1/models", headers=headers).status_code == 200


def test_a_local_users_keys_do_not_lapse(settings):
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    get_user_model().objects.filter(pk=alice.pk).update(last_login=timezone.now() - timedelta(days=365))
    assert Client().get("/v1/models", headers=bearer(alice, "openai")).status_code == 200
