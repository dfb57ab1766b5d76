"""API tokens: hashed at rest, scoped, revocable, shown once."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import RequestFactory

from apitokens.auth import user_for_request
from apitokens.models import ApiToken
from apitokens.services import KeyRefused, token_issue

pytestmark = pytest.mark.django_db


def bearer(token: str):
    request = RequestFactory().get("/", HTTP_AUTHORIZATION=f"Bearer {token}")
    return request


def test_it_prints_a_token_once_and_stores_only_its_digest(alice):
    out = StringIO()
    call_command("issue_token", "alice", "--scope", "store.read", stdout=out, stderr=StringIO())
    plain = out.getvalue().strip()
    row = ApiToken.objects.get()
    assert plain.startswith(f"chat_{row.prefix}_")
    secret = plain.split("_", 2)[2]
    assert secret not in row.digest and len(row.digest) == 64
    assert user_for_request(bearer(plain), "store.read") == alice


def test_it_refuses_a_token_without_the_scope_a_wrong_secret_or_a_revoked_token(alice):
    _, plain = token_issue(user=alice, scopes=["store.read"])
    assert user_for_request(bearer(plain), "jobs.submit") is None
    assert user_for_request(bearer(plain[:-2] + "xx"), "store.read") is None
    assert user_for_request(bearer("garbage"), "store.read") is None
    prefix = plain.split("_")[1]
    call_command("revoke_token", prefix, stdout=StringIO())
    assert user_for_request(bearer(plain), "store.read") is None
    with pytest.raises(CommandError):
        call_command("revoke_token", prefix, stdout=StringIO())


def test_it_never_falls_back_to_the_session_when_a_bad_token_is_sent(alice):
    request = bearer("chat_nope_nope")
    request.user = alice
    assert user_for_request(request, "store.read") is None
    session_only = RequestFactory().get("/")
    session_only.user = alice
    assert user_for_request(session_only, "store.read") == alice


def test_it_gives_the_jobs_scope_to_staff_only(alice):
    with pytest.raises(CommandError, match="staff"):
        call_command("issue_token", "alice", "--scope", "jobs.submit", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="no user"):
        call_command("issue_token", "nobody", stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize("change", ["new_password", "deactivate"])
def test_a_users_keys_die_when_the_password_changes_or_the_account_is_deactivated(alice, bob, change):
    _, first = token_issue(user=alice, scopes=["openai"])
    _, second = token_issue(user=alice, scopes=["store.read"])
    _, bobs = token_issue(user=bob, scopes=["openai"])
    alice.last_name = "Liddell"
    alice.save()  # a change that is not the login's keeps the keys
    assert user_for_request(bearer(first), "openai") == alice
    if change == "new_password":
        alice.set_password("a-new-password-123")
    else:
        alice.is_active = False
    alice.save()
    assert user_for_request(bearer(first), "openai") is None
    assert user_for_request(bearer(second), "store.read") is None
    assert user_for_request(bearer(bobs), "openai") == bob
    assert not ApiToken.objects.filter(user=alice, revoked_at=None).exists()


def test_a_user_holds_a_bounded_number_of_live_keys(alice, settings):
    settings.API_KEYS_MAX_PER_USER = 3
    tokens = [token_issue(user=alice, scopes=["openai"]) for _ in range(3)]
    with pytest.raises(KeyRefused, match="3 live keys"):
        token_issue(user=alice, scopes=["openai"])
    with pytest.raises(CommandError, match="3 live keys"):
        call_command("issue_token", "alice", "--scope", "openai", stdout=StringIO(), stderr=StringIO())
    revoke_prefix = tokens[0][0].prefix
    call_command("revoke_token", revoke_prefix, stdout=StringIO())
    token_issue(user=alice, scopes=["openai"])  # room again
