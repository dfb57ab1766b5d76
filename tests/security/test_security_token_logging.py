"""API tokens never reach the logs: not in the product's log lines (plain or JSON), not in
daphne's access log, not in Django's error reports."""

import logging

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import RequestFactory
from django.views.debug import SafeExceptionReporterFilter

from apitokens.services import token_issue, token_revoke
from logcontext import ContextFilter, JsonFormatter, PlainFormatter
from tests.support.product import LOGS, running_daphne

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token():
    alice = get_user_model().objects.create_user("alice", password="pw-alice-1234")
    _, plain = token_issue(user=alice, scopes=["store.read", "chat"])
    revoked, stale = token_issue(user=alice, scopes=["store.read"])
    token_revoke(prefix=revoked.prefix)
    return plain, stale


REQUESTS = [
    ("GET", "/api/conversations/", None),
    ("GET", "/api/conversations/987654/", None),  # 404, logged by django.request
    ("POST", "/chat/stream", b"{not json"),  # 400
    ("POST", "/api/jobs/", b"{}"),  # 401/403: the scope is missing
    ("GET", "/metrics", None),
]


def secrets_of(plain: str) -> list[str]:
    """The whole token and its secret part: neither may appear anywhere."""
    return [plain, plain.split("_", 2)[2]]  # chat_<prefix>_<secret>; the secret may hold "_"


def test_it_logs_no_token_text_from_requests_that_carry_one(client, token, caplog):
    caplog.set_level(logging.DEBUG)
    for plain in token:
        for method, path, body in REQUESTS:
            headers = {"HTTP_AUTHORIZATION": f"Bearer {plain}"}
            if method == "GET":
                client.get(path, **headers)
            else:
                client.post(path, body, content_type="application/json", **headers)
    assert any(r.name == "django.request" for r in caplog.records), "the 404 was not logged"
    context = ContextFilter()
    lines = []
    for record in caplog.records:
        context.filter(record)
        lines += [PlainFormatter().format(record), JsonFormatter().format(record), repr(record.__dict__)]
    text = "\n".join(lines)
    for plain in token:
        for secret in secrets_of(plain):
            assert secret not in text


def test_it_hides_the_authorization_header_in_error_reports(token):
    request = RequestFactory().get("/api/conversations/", HTTP_AUTHORIZATION=f"Bearer {token[0]}")
    meta = SafeExceptionReporterFilter().get_safe_request_meta(request)
    assert token[0] not in str(meta)


def test_it_keeps_tokens_out_of_the_servers_own_log(token, django_db_setup):
    with running_daphne("http://127.0.0.1:9", LOG_LEVEL="DEBUG", LOG_FORMAT="json") as server:
        port = server.url.rsplit(":", 1)[1]
        for plain in token:
            headers = {"Authorization": f"Bearer {plain}"}
            for method, path, body in REQUESTS:
                httpx.request(method, server.url + path, content=body, headers=headers, timeout=10)
        log = (LOGS / f"test-daphne-{port}.log").read_text()
    assert "/api/conversations/987654/" in log  # the requests were logged
    for plain in token:
        for secret in secrets_of(plain):
            assert secret not in log
