"""The product's own error pages (templates/errors/page.html), as production mode (DEBUG off) serves
them: a missing page, another user's conversation and a revoked share link get the chat's 404 page,
never Django's debug page with the site's URL patterns; 400, 403, a stale form's CSRF failure and 500
the same way, 500 rendered without a request. tests/topology/test_make_run.py sees them from `make run`."""

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.template import loader
from django.test import Client, RequestFactory
from django.views import defaults

from conversations import services, turns

pytestmark = pytest.mark.django_db

# What Django's debug pages show, and the product's pages never do.
DEBUG_PAGE_TEXT = ("URLconf", "urlpatterns", "Traceback", "settings file", "api/conversations/")


def assert_product_page(body: str, code: int, heading: str) -> None:
    """The chat's look (its stylesheet and theme script) with a way back to the chat, nothing more."""
    assert f'<p class="error-code">{code}</p>' in body and f"<h1>{heading}</h1>" in body
    assert '<link rel="stylesheet" href="/static/frontend/chat.css">' in body
    assert '<link rel="stylesheet" href="/static/errors/errors.css">' in body
    assert '<script src="/static/frontend/theme.js"></script>' in body
    assert '<a class="error-home" href="/">Back to the chat</a>' in body
    assert not [text for text in DEBUG_PAGE_TEXT if text in body]


@pytest.fixture(autouse=True)
def production_mode(settings):
    settings.DEBUG = False


@pytest.fixture
def alice_and_mallory():
    users = get_user_model().objects
    alice = users.create_user("err-alice", password="pw-err-alice-1")
    mallory = users.create_user("err-mallory", password="pw-err-mallory-1")
    return alice, mallory


def test_it_answers_another_users_conversation_with_the_products_404_page(alice_and_mallory):
    alice, mallory = alice_and_mallory
    theirs = services.conversation_create(user=alice)
    client = Client()
    client.force_login(mallory)
    foreign = client.get(f"/c/{theirs.pk}/")
    assert foreign.status_code == 404
    assert_product_page(foreign.content.decode(), 404, "Not found")
    # Word for word the page of an id that does not exist: nothing tells them apart.
    assert client.get(f"/c/{theirs.pk + 1000}/").content == foreign.content


def test_it_answers_a_revoked_share_link_with_the_products_404_page(alice_and_mallory):
    alice, _ = alice_and_mallory
    turn = turns.chat_turn_start(user=alice, conversation_id=None, content="Name a colour.")
    turns.message_finish(message_id=turn.assistant_message_id, content="Blue.", status="complete")
    link = services.conversation_share(user=alice, conversation_id=turn.conversation_id)
    assert Client().get(f"/s/{link.token}/").status_code == 200
    services.conversation_unshare(user=alice, conversation_id=turn.conversation_id)
    revoked = Client().get(f"/s/{link.token}/")
    assert revoked.status_code == 404
    assert_product_page(revoked.content.decode(), 404, "Not found")
    assert Client().get("/no/such/page/").content == revoked.content


def test_it_answers_a_forbidden_admin_page_with_the_products_403_page():
    staff = get_user_model().objects.create_user("err-staff", password="pw-err-staff-1", is_staff=True)
    client = Client()
    client.force_login(staff)  # staff without a single model permission
    response = client.get("/admin/auth/user/")
    assert response.status_code == 403
    assert_product_page(response.content.decode(), 403, "Not allowed")


def test_it_answers_a_stale_form_with_the_products_csrf_page():
    response = Client(enforce_csrf_checks=True).post(
        "/accounts/login/", {"username": "nobody", "password": "x"}
    )
    assert response.status_code == 403
    assert_product_page(response.content.decode(), 403, "Page out of date")


def test_it_answers_a_host_it_does_not_serve_with_the_products_400_page():
    response = Client(HTTP_HOST="evil.example").get("/accounts/login/")
    assert response.status_code == 400
    assert_product_page(response.content.decode(), 400, "Bad request")


def test_it_renders_the_500_page_without_a_request_or_context_processors():
    # As Django's handler renders it: no request, so no context processors and no user.
    assert_product_page(loader.get_template("500.html").render(), 500, "Something went wrong")
    response = defaults.server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    assert_product_page(response.content.decode(), 500, "Something went wrong")


def test_each_page_says_what_happened_in_words_of_its_own():
    request = RequestFactory().get("/")
    pages = {
        400: defaults.bad_request(request, Exception("internal detail")),
        403: defaults.permission_denied(request, PermissionDenied("internal detail")),
        404: defaults.page_not_found(request, Exception("internal detail")),
        500: defaults.server_error(request),
    }
    for code, response in pages.items():
        assert response.status_code == code
        assert "internal detail" not in response.content.decode()
    assert len({response.content for response in pages.values()}) == len(pages)
