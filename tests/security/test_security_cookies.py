"""Cookies and CSRF in the default configuration: the session cookie is HttpOnly and SameSite,
and every form that changes something needs the CSRF token. (TLS-only cookies in production
mode: tests/security/test_security_production.py.)"""

import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def test_it_sets_an_httponly_samesite_session_cookie_and_a_samesite_csrf_cookie():
    get_user_model().objects.create_user("alice", password="pw-alice-1234")
    client = Client(enforce_csrf_checks=True)
    form = client.get("/accounts/login/")
    csrf = form.cookies["csrftoken"]
    assert csrf["samesite"] == "Lax"
    # The chat's script reads it to send X-CSRFToken, so it is not HttpOnly (docs/security.md).
    login = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "pw-alice-1234", "csrfmiddlewaretoken": csrf.value},
    )
    assert login.status_code == 302
    session = login.cookies["sessionid"]
    assert session["httponly"] is True and session["samesite"] == "Lax"


@pytest.mark.parametrize(
    "path, staff",
    [
        ("/accounts/login/", False),
        ("/accounts/logout/", False),
        ("/admin/login/", False),
        ("/admin/logout/", True),
        ("/admin/jobs/job/add/", True),
        ("/admin/jobs/job/1/do/cancel/", True),
        ("/admin/password_change/", True),
        ("/c/new", False),
    ],
)
def test_it_refuses_a_post_without_the_csrf_token(path, staff):
    user = get_user_model().objects.create_superuser("root", password="pw-root-12345") if staff else None
    user = user or get_user_model().objects.create_user("bob", password="pw-bob-123456")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(path, {"username": "bob", "password": "pw-bob-123456"})
    assert response.status_code == 403


@pytest.mark.parametrize("authorization", ["Bearer junk", "Bearer ", "Basic Ym9iOng="])
def test_an_authorization_header_that_authenticates_no_one_does_not_skip_the_csrf_check(authorization):
    user = get_user_model().objects.create_user("bob", password="pw-bob-123456")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post("/c/new", "{}", content_type="application/json", HTTP_AUTHORIZATION=authorization)
    assert (response.status_code, response.json()["error"]["code"]) == (403, "csrf_failed")


def test_it_puts_the_csrf_token_in_every_post_form_of_the_templates():
    templates = [*ROOT.glob("templates/**/*.html"), *ROOT.glob("*/templates/**/*.html")]
    assert templates
    for template in templates:
        text = template.read_text()
        for form in re.findall(r"<form[^>]*method=\"post\"[^>]*>(.*?)</form>", text, re.S | re.I):
            assert "{% csrf_token %}" in form, template
