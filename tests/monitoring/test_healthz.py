"""/healthz reports the database, Redis and the engine, and is 200 only when all are up;
/healthz/live says the process answers, /healthz/ready that it can serve all but new answers."""

import pytest

from monitoring import health

pytestmark = pytest.mark.django_db


def test_it_is_ok_when_database_redis_and_both_engines_are_up(client, engine_url, embedding_engine, settings):
    settings.INFERENCE_URL = engine_url
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "redis": "ok",
        "engine": "ok",
        "embedding_engine": "ok",
        "engine_circuit": "closed",
    }


def test_it_names_the_embedding_engine_when_it_is_down_and_stays_ready(
    client, engine_url, embedding_engine, settings
):
    settings.INFERENCE_URL = engine_url
    settings.EMBEDDING_URL = "http://127.0.0.1:1"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["engine"]) == ("degraded", "ok")
    assert body["embedding_engine"].startswith("error")
    ready = client.get("/healthz/ready")
    assert ready.status_code == 200 and ready.json()["embedding_engine"].startswith("error")


def test_it_is_unavailable_and_names_the_engine_when_the_engine_is_down(client, settings):
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["engine"].startswith("error")
    assert body["database"] == "ok"


def test_it_names_redis_when_redis_is_down(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    body = client.get("/healthz").json()
    assert body["redis"].startswith("error")


def test_it_reports_an_open_circuit(client, settings):
    from inference.engine import engine_client

    breaker = engine_client().breaker
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    for _ in range(breaker.failure_threshold):
        breaker.record_failure()
    try:
        assert client.get("/healthz").json()["engine_circuit"] == "open"
    finally:
        breaker.record_success()


def test_it_stays_live_and_ready_with_the_engine_down_and_says_so(client, settings):
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    assert client.get("/healthz/live").json() == {"status": "ok"}
    response = client.get("/healthz/ready")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["database"], body["redis"]) == ("ok", "ok", "ok")
    assert body["engine"].startswith("error")


def test_it_is_not_ready_without_redis_but_still_live(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert client.get("/healthz/live").status_code == 200
    response = client.get("/healthz/ready")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("error")


@pytest.fixture(autouse=True)
def fresh_checks():
    # The checks are cached for a second; each test changes what they see.
    health._cache.clear()
    yield
    health._cache.clear()


def test_it_says_what_a_starting_engine_is_doing_instead_of_an_error(client, settings):
    from enginehost import state

    settings.INFERENCE_URL = "http://127.0.0.1:1"
    state.publish("starting", "loading the model's weights")
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["engine"]) == ("starting", "starting: loading the model's weights")
    assert client.get("/healthz/ready").json()["engine"] == "starting: loading the model's weights"
    # Serving, or a state for another engine's address, is no excuse: the failure shows.
    state.publish("serving", "")
    health._cache.clear()
    assert client.get("/healthz").json()["engine"].startswith("error: ")


def test_behind_the_router_it_says_a_replica_is_starting_while_the_router_cannot_answer(client, settings):
    from enginehost import state
    from inference.topology import replica_url

    # The router listens only once every replica is healthy: until then, the replicas say why.
    settings.INFERENCE_URL, settings.INFERENCE_REPLICAS = "http://127.0.0.1:1", 2
    first, second = (replica_url(settings.INFERENCE_URL, index) for index in (0, 1))
    state.publish("serving", "", url=first)
    state.publish("restarting", "it stopped and starts again in 2 s", url=second)
    health._cache.clear()
    body = client.get("/healthz").json()
    assert (body["status"], body["engine"]) == ("starting", "restarting: it stopped and starts again in 2 s")
    # A replica of another site (another INFERENCE_URL) tells nothing.
    settings.INFERENCE_URL = "http://127.0.0.1:100"
    health._cache.clear()
    assert client.get("/healthz").json()["engine"].startswith("error: ")
