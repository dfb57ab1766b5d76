"""What single sign-on refuses: a local account taken over by an unverified e-mail, a sign-in whose
ID token carries another nonce, tokens that are forged, unsigned, HMAC-signed, expired or for another
party, an unsafe signature algorithm in the configuration, and local passwords under SSO_ONLY but
the break-glass account's, which the login throttle still counts (docs/security.md)."""

import time

import jwt
import pytest
import requests
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from chatsite import signon
from sso import tokens
from tests.support.oidc_provider import flow
from tests.support.oidc_provider.harness import PROVIDER_ID, new_rsa_key

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_unverified_email_does_not_take_over_a_local_account(sso):
    alice = get_user_model().objects.create_user("alice", email="alice@example.com", password="pw-alice-123")
    sso.set_user("mallory", password="pw-mallory", email="Alice@Example.com", email_verified=False)
    client = Client()
    response = flow.sign_in(client, "mallory", "pw-mallory")
    assert response.status_code == 403
    assert b"Sign-in refused" in response.content
    assert not SocialAccount.objects.exists()
    assert "_auth_user_id" not in client.session
    assert get_user_model().objects.filter(email__iexact="alice@example.com").get() == alice


def test_a_verified_email_links_the_local_account(sso):
    bob = get_user_model().objects.create_user("bob", email="bob@example.com", password="pw-bob-12345")
    sso.set_user("robert", password="pw-robert", email="bob@example.com", email_verified=True)
    client = Client()
    assert flow.sign_in(client, "robert", "pw-robert").status_code == 302
    assert SocialAccount.objects.get().user == bob
    assert int(client.session["_auth_user_id"]) == bob.pk


def test_an_id_token_with_another_nonce_is_refused(sso):
    sso.set_user("nina", password="pw-nina", email="nina@example.com")
    client = Client()
    authorization = flow.begin(client)
    session = client.session
    states = session["socialaccount_states"]
    for state_id, (state, stashed_at, provider_id) in list(states.items()):
        states[state_id] = ({**state, "nonce": "another-sign-in's-nonce"}, stashed_at, provider_id)
    session["socialaccount_states"] = states
    session.save()
    response = flow.finish(client, flow.authorize(authorization, "nina", "pw-nina"))
    assert b"Sign-in failed" in response.content
    assert "_auth_user_id" not in client.session
    assert not get_user_model().objects.filter(email="nina@example.com").exists()


@pytest.fixture
def id_token_claims(sso) -> dict:
    now = int(time.time())
    return {"iss": sso.issuer, "aud": sso.client_id, "sub": "7", "iat": now, "exp": now + 300, "nonce": "n-1"}


def checked(sso, token: str) -> dict:
    configuration = requests.get(sso.issuer + "/.well-known/openid-configuration", timeout=10).json()
    with requests.Session() as session:
        claims = tokens.verify(
            token,
            provider_id=PROVIDER_ID,
            jwks_uri=configuration["jwks_uri"],
            issuer=configuration["issuer"],
            audience=sso.client_id,
            required=["iss", "aud", "exp", "iat", "sub"],
            session=session,
        )
    return tokens.check_id_token(claims, audience=sso.client_id, nonce="n-1")


def test_a_token_signed_with_the_providers_key_is_taken(sso, id_token_claims):
    assert checked(sso, sso.sign(id_token_claims))["sub"] == "7"


def test_a_forged_token_is_refused(sso, id_token_claims):
    with pytest.raises(tokens.TokenInvalid, match="Signature verification failed"):
        checked(sso, sso.sign(id_token_claims, key=new_rsa_key()))


def test_an_unsigned_token_is_refused(sso, id_token_claims):
    unsigned = jwt.encode(id_token_claims, None, algorithm="none", headers={"kid": sso.kid})
    with pytest.raises(tokens.TokenInvalid, match="'none' is not one of"):
        checked(sso, unsigned)


def test_a_token_signed_with_the_client_secret_is_refused(sso, id_token_claims):
    hmac_signed = sso.sign(id_token_claims, key=sso.client_secret * 2, algorithm="HS256")
    with pytest.raises(tokens.TokenInvalid, match="'HS256' is not one of"):
        checked(sso, hmac_signed)


def test_an_expired_token_is_refused(sso, id_token_claims):
    long_ago = int(time.time()) - 3600
    with pytest.raises(tokens.TokenInvalid, match="expired"):
        checked(sso, sso.sign({**id_token_claims, "iat": long_ago, "exp": long_ago + 300}))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"aud": "another-client"}, "(?i)audience"),
        ({"iss": "http://127.0.0.1:9/o"}, "(?i)issuer"),
        ({"nonce": "n-2"}, "nonce"),
    ],
)
def test_a_token_for_another_party_or_sign_in_is_refused(sso, id_token_claims, change, reason):
    with pytest.raises(tokens.TokenInvalid, match=reason):
        checked(sso, sso.sign({**id_token_claims, **change}))


@pytest.mark.parametrize("algorithms", ["none", "HS256", "RS256,none"])
def test_an_unsafe_algorithm_stops_the_process(monkeypatch, algorithms):
    for name, value in {
        "SSO_OIDC_PROVIDERS": "idp",
        "SSO_OIDC_IDP_SERVER_URL": "https://idp.example.com",
        "SSO_OIDC_IDP_CLIENT_ID": "chat",
        "SSO_OIDC_IDP_CLIENT_SECRET": "secret",
        "SSO_OIDC_IDP_ALGORITHMS": algorithms,
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match="SSO_OIDC_IDP_ALGORITHMS"):
        signon.oidc_providers({})


def test_the_client_secret_is_read_from_a_file(monkeypatch, tmp_path):
    (tmp_path / "secret").write_text("from-the-file\n")
    for name, value in {
        "SSO_OIDC_PROVIDERS": "idp",
        "SSO_OIDC_IDP_SERVER_URL": "https://idp.example.com/",
        "SSO_OIDC_IDP_CLIENT_ID": "chat",
        "SSO_OIDC_IDP_CLIENT_SECRET_FILE": str(tmp_path / "secret"),
    }.items():
        monkeypatch.setenv(name, value)
    products, apps = signon.oidc_providers({"a": "b"})
    assert apps[0]["secret"] == "from-the-file"
    assert apps[0]["settings"]["oauth_pkce_enabled"] is True
    assert (
        products["idp"]["group_map"] == {"a": "b"}
        and products["idp"]["server_url"] == "https://idp.example.com"
    )


def log_in(username: str, password: str):
    return Client().post("/accounts/login/", {"username": username, "password": password})


@pytest.fixture
def sso_only(settings):
    settings.SSO_ONLY = True
    settings.SSO_BREAK_GLASS_USER = "root-admin"
    get_user_model().objects.create_user("root-admin", password="pw-glass-123", is_staff=True)
    get_user_model().objects.create_user("alice", password="pw-alice-123")


def test_sso_only_refuses_local_passwords(sso_only):
    response = log_in("alice", "pw-alice-123")
    assert response.status_code == 200 and response.context["form"].errors


def test_sso_only_lets_the_break_glass_account_in(sso_only):
    assert log_in("root-admin", "pw-glass-123").status_code == 302


def test_the_break_glass_account_must_be_staff(sso_only, settings):
    settings.SSO_BREAK_GLASS_USER = "alice"
    assert log_in("alice", "pw-alice-123").status_code == 200


def test_the_login_throttle_still_guards_the_break_glass_account(sso_only, settings):
    for _ in range(settings.LOGIN_FAILURES_PER_USERNAME):
        assert log_in("root-admin", "wrong").status_code == 200
    assert log_in("root-admin", "pw-glass-123").status_code == 429


def test_sso_only_without_a_provider_stops_the_checks(settings):
    from sso.checks import check_sso_only

    settings.SSO_ONLY, settings.SSO_PROVIDERS, settings.SSO_BREAK_GLASS_USER = True, {}, ""
    assert {problem.id for problem in check_sso_only(None)} == {"sso.E001", "sso.W001"}
    settings.SSO_PROVIDERS = {"idp": {"protocol": "oidc"}}
    settings.SSO_BREAK_GLASS_USER = "root-admin"
    assert check_sso_only(None) == []
