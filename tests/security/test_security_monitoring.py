"""What /healthz and /metrics tell whom: status only to the public, details (failures by kind, never
their messages) to staff, the token's holder and the private network; checks cached for a second."""

import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from monitoring import health
from monitoring.checks import check_metrics_token

pytestmark = pytest.mark.django_db
# A public address (the documentation ranges count as private to Python's ipaddress).
PUBLIC = "93.184.216.34"


@pytest.fixture(autouse=True)
def fresh_checks(settings):
    health._cache.clear()
    settings.INFERENCE_URL = "http://127.0.0.1:1"  # the engine down: something to hide
    yield
    health._cache.clear()


def from_address(address: str) -> Client:
    return Client(REMOTE_ADDR=address)


def test_it_tells_the_public_the_status_only(settings):
    settings.REDIS_URL = "redis://:hunter2@127.0.0.1:1/0"
    for path, code in [("/healthz", 503), ("/healthz/ready", 503)]:
        response = from_address(PUBLIC).get(path)
        assert (response.status_code, response.json()) == (code, {"status": response.json()["status"]})
    assert from_address(PUBLIC).get("/healthz/live").json() == {"status": "ok"}


def test_it_names_failures_by_kind_never_by_message_to_those_who_may_read_them(settings):
    staff = get_user_model().objects.create_user("ops", password="pw-ops-123456", is_staff=True)
    client = from_address(PUBLIC)
    client.force_login(staff)
    settings.REDIS_URL = "redis://:hunter2@127.0.0.1:1/0"
    body = client.get("/healthz").json()
    assert body["redis"] == "error: ConnectionError" and body["engine"].startswith("error: ")
    assert body["database"] == "ok"
    assert "hunter2" not in str(body) and "127.0.0.1" not in str(body)
    # The private network (Prometheus, the kubelet) reads them too.
    assert "redis" in from_address("10.1.2.3").get("/healthz").json()


def test_it_asks_for_the_token_once_one_is_set(settings):
    settings.MONITORING_METRICS_TOKEN = "s3cret"
    assert from_address("127.0.0.1").get("/healthz").json().keys() == {"status"}
    with_token = from_address(PUBLIC).get("/healthz", headers={"Authorization": "Bearer s3cret"})
    assert "engine" in with_token.json()
    assert from_address("127.0.0.1").get("/metrics").status_code == 401
    assert from_address(PUBLIC).get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_it_serves_metrics_without_a_token_to_the_private_network_only_in_production(settings):
    settings.DEBUG = False
    assert from_address(PUBLIC).get("/metrics").status_code == 403
    assert from_address("127.0.0.1").get("/metrics").status_code == 200
    assert from_address("10.0.0.7").get("/metrics").status_code == 200
    # Behind a trusted proxy the client it names counts, not the proxy.
    settings.TRUSTED_PROXIES = ["127.0.0.1"]
    forwarded = from_address("127.0.0.1").get("/metrics", headers={"X-Forwarded-For": PUBLIC})
    assert forwarded.status_code == 403
    settings.DEBUG = True
    assert from_address(PUBLIC).get("/metrics").status_code == 200


def test_it_checks_at_most_once_a_second(monkeypatch):
    calls = []
    monkeypatch.setitem(health.CHECKS, "database", lambda: calls.append(1) or "ok")
    client = from_address("127.0.0.1")
    for _ in range(5):
        assert client.get("/healthz/ready").json()["database"] == "ok"
    assert len(calls) == 1
    time.sleep(health.CACHE_SECONDS + 0.1)
    client.get("/healthz/ready")
    assert len(calls) == 2


def test_it_warns_a_production_deployment_without_a_metrics_token(settings):
    settings.DEBUG = False
    settings.MONITORING_METRICS_TOKEN = ""
    assert [w.id for w in check_metrics_token(None)] == ["monitoring.W001"]
    settings.MONITORING_METRICS_TOKEN = "s3cret"
    assert check_metrics_token(None) == []
