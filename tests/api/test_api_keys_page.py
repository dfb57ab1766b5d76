"""`/keys/`: users issue, see and revoke their own API keys; the key is shown once."""

import re

import pytest
from django.test import Client

from apitokens.models import ApiToken

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_issues_a_key_shown_once_that_works_on_the_api(alice, settings):
    client = logged_in(alice)
    response = client.post("/keys/", {"name": "<b>laptop</b>", "scope": ["openai"]})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    [plain] = re.findall(r'<code id="plain-key">(chat_[^<]+)</code>', page)
    assert "&lt;b&gt;laptop&lt;/b&gt;" in page and "<b>laptop</b>" not in page
    token = ApiToken.objects.get(user=alice)
    assert (token.name, token.scopes) == ("<b>laptop</b>", ["openai"])
    models = Client().get("/v1/models", headers={"Authorization": f"Bearer {plain}"})
    assert models.status_code == 200
    assert plain not in client.get("/keys/").content.decode()
    assert f"chat_{token.prefix}_" in client.get("/keys/").content.decode()


@pytest.mark.parametrize(
    "form, error",
    [
        ({"name": "x"}, "scopes must be some of"),
        ({"scope": ["jobs.submit"]}, "only staff"),
        ({"scope": ["root"]}, ""),
    ],
)
def test_it_refuses_a_key_without_a_scope_it_may_hold(alice, form, error):
    response = logged_in(alice).post("/keys/", form)
    assert response.status_code == 400 and error in response.content.decode()
    assert 'id="plain-key"' not in response.content.decode()
    assert not ApiToken.objects.exists()


def test_it_lets_staff_hold_the_jobs_scope(alice):
    alice.is_staff = True
    alice.save()
    assert logged_in(alice).post("/keys/", {"scope": ["jobs.submit"]}).status_code == 200
    assert ApiToken.objects.get().scopes == ["jobs.submit"]


def test_it_revokes_the_users_own_keys_only(alice, bob):
    logged_in(alice).post("/keys/", {"scope": ["chat"]})
    logged_in(bob).post("/keys/", {"scope": ["chat"]})
    mine, theirs = ApiToken.objects.get(user=alice), ApiToken.objects.get(user=bob)
    client = logged_in(alice)
    assert client.post("/keys/", {"action": "revoke", "prefix": theirs.prefix}).status_code == 404
    assert client.post("/keys/", {"action": "revoke", "prefix": mine.prefix}).status_code == 302
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None and theirs.revoked_at is None
    assert theirs.prefix not in client.get("/keys/").content.decode()


def test_it_needs_a_login_and_the_csrf_token(alice):
    assert Client().get("/keys/").status_code == 302
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post("/keys/", {"scope": ["chat"]}).status_code == 403
    assert not ApiToken.objects.exists()
