"""/metrics exposes the web tier's metrics, and a real chat moves them."""

import subprocess
import sys
import textwrap
import time

import httpx
import pytest
from django.contrib.auth import get_user_model
from prometheus_client.parser import text_string_to_metric_families

from tests.support.chat_client import collect_answer, open_chat, send

NAMED = [
    "chat_time_to_first_token_seconds",
    "chat_time_between_tokens_seconds",
    "chat_streamed_tokens",
    "chat_generation_tokens_per_second",
    "chat_active_generations",
    "chat_websocket_connections",
    "chat_admissions_refused",
    "chat_engine_circuit_state",
    "chat_engine_errors",
    "chat_bulk_jobs",
    "chat_bulk_job_documents",
]


def values(text: str) -> dict[tuple, float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(figures: dict, name: str, **labels) -> float:
    return figures.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(base: str) -> dict:
    response = httpx.get(base + "/metrics", timeout=10)
    assert response.status_code == 200
    return values(response.text)


@pytest.mark.django_db
def test_it_exposes_the_named_metrics_in_prometheus_format(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    families = {family.name for family in text_string_to_metric_families(response.content.decode())}
    assert sorted(set(NAMED) - families) == []


def test_a_fresh_process_exposes_each_apps_metrics_before_using_them():
    """Each app registers its metrics when it starts (its AppConfig.ready), not when monitoring
    imports them: a process that only started Django and rendered /metrics shows them all."""
    families = {family.name for family in text_string_to_metric_families(_rendered({}))}
    owned = {
        "answers": "chat_time_to_first_token_seconds",
        "chat": "chat_websocket_connections",
        "inference": "chat_engine_circuit_state",
    }
    assert {app: name for app, name in owned.items() if name not in families} == {}


@pytest.mark.django_db
def test_it_asks_for_the_bearer_token_when_one_is_set(client, settings):
    settings.MONITORING_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.django_db
def test_it_reports_bulk_job_progress_from_the_database(client):
    from jobs.models import Document, Job

    owner = get_user_model().objects.create_user("bulk-owner")
    job = Job.objects.create(owner=owner, instruction="Summarize.", max_summary_tokens=64, status="running")
    Job.objects.create(owner=owner, instruction="Summarize.", max_summary_tokens=64, status="queued")
    Job.objects.create(owner=owner, instruction="Summarize.", max_summary_tokens=64, status="completed")
    for status in ["done", "done", "running", "pending"]:
        Document.objects.create(job=job, external_id=f"doc-{status}", text="x", status=status)
    figures = values(client.get("/metrics").content.decode())
    assert value(figures, "chat_bulk_jobs", status="running") == 1
    assert value(figures, "chat_bulk_jobs", status="queued") == 1
    assert value(figures, "chat_bulk_job_documents", status="done") == 2
    assert value(figures, "chat_bulk_job_documents", status="pending") == 1


@pytest.mark.django_db(transaction=True)
def test_it_moves_when_a_real_chat_runs(product_server, ws_url, origin):
    user = get_user_model().objects.create_user("metrics-user", password="pw-metrics-123")
    before = scrape(product_server)
    with open_chat(ws_url, origin, user) as ws:
        deadline = time.monotonic() + 10
        while value(scrape(product_server), "chat_websocket_connections") < 1:
            assert time.monotonic() < deadline, "the open WebSocket was not counted"
            time.sleep(0.1)
        send(ws, {"type": "chat.send", "conversation": None, "content": "Name three animals."})
        _, tokens, done = collect_answer(ws)
        assert done["type"] == "chat.done", done
    deadline = time.monotonic() + 10
    while (after := scrape(product_server))[("chat_websocket_connections", ())] > 0:
        assert time.monotonic() < deadline, "the closed WebSocket was still counted"
        time.sleep(0.1)

    def moved(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("chat_time_to_first_token_seconds_count") == 1
    assert moved("chat_turn_store_seconds_count") == 1 and 0 < moved("chat_turn_store_seconds_sum") < 60
    assert 0 < moved("chat_time_to_first_token_seconds_sum") < 60
    assert moved("chat_time_between_tokens_seconds_count") == len(tokens) - 1
    assert moved("chat_streamed_tokens_total") == len(tokens)
    assert moved("chat_generations_total", status="complete") == 1
    assert moved("chat_completion_tokens_total") == done["usage"]["completion_tokens"]
    assert moved("chat_websocket_connections_opened_total") == 1
    assert value(after, "chat_active_generations") == 0


def test_a_token_clock_adds_what_one_observation_a_token_would(monkeypatch):
    """The gaps wait in the clock, by bucket, and reach the histogram at a flush: the same buckets,
    count and sum as Histogram.observe for each gap, the token counter moved by one a token."""
    from prometheus_client import REGISTRY

    from answers import metrics

    def figures() -> dict:
        names = ("chat_time_between_tokens_seconds", "chat_streamed_tokens")
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in REGISTRY.collect()
            if family.name in names
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    gaps = [0.004, 0.005, 0.0051, 0.02, 0.3, 7.0, 0.02]
    monkeypatch.setattr(metrics, "FLUSH_SECONDS", 3600.0)
    before = figures()
    times = [1.0]
    for gap in gaps:
        times.append(times[-1] + gap)
    clock = metrics.TokenClock(0.0)
    for now in times:
        clock.tick(now)
    assert (
        figures()[("chat_time_between_tokens_seconds_count", ())]
        == before[("chat_time_between_tokens_seconds_count", ())]
    ), "flushed before its time"
    clock.flush()
    batched = {key: figures()[key] - before[key] for key in before}

    before = figures()
    for previous, now in zip(times, times[1:], strict=False):
        metrics.TIME_BETWEEN_TOKENS.observe(now - previous)
    metrics.STREAMED_TOKENS.inc(1 + len(gaps))
    observed = {key: figures()[key] - before[key] for key in before}
    assert batched == pytest.approx(observed)
    assert batched[("chat_time_between_tokens_seconds_count", ())] == len(gaps)


def test_it_sums_every_process_in_multiprocess_mode(tmp_path):
    """Two processes write to one PROMETHEUS_MULTIPROC_DIR; a third renders their sum."""
    setup = (
        "import django\ndjango.setup()\nfrom answers import metrics as answer\n"
        "from chat import metrics as chat\nfrom inference import metrics as engine\n"
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "chatsite.settings"}
    writer = setup + textwrap.dedent(
        """
        chat.websocket_opened()
        clock = answer.TokenClock(0.0)
        clock.tick(0.2)
        clock.tick(0.25)
        clock.flush()
        answer.engine_error("engine_timeout")
        engine.circuit_state("open")
        """
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", writer], env=_env(env), check=True, timeout=60)
    # The writers exited, so their live gauges are gone; counters and histograms remain.
    figures = values(_rendered(env))
    assert value(figures, "chat_time_to_first_token_seconds_count") == 2
    assert value(figures, "chat_time_between_tokens_seconds_bucket", le="0.05") == 2
    assert value(figures, "chat_streamed_tokens_total") == 4
    assert value(figures, "chat_engine_errors_total", code="engine_timeout") == 2
    assert value(figures, "chat_websocket_connections_opened_total") == 2
    assert value(figures, "chat_websocket_connections") == 0


def test_a_killed_process_leaves_the_live_gauges_at_the_next_scrape(tmp_path):
    """A web process killed mid-answer (SIGKILL: no exit hook runs) left "Active answers 1" on the
    dashboard for as long as nothing restarted the site."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "chatsite.settings"}
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import django, sys, time\ndjango.setup()\nfrom answers import metrics as answer\n"
            "from chat import metrics as chat\nanswer.generation_started()\nchat.websocket_opened()\n"
            "print('up', flush=True)\ntime.sleep(600)",
        ],
        env=_env(env),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert busy.stdout.readline().strip() == "up"
        assert value(values(_rendered(env)), "chat_active_generations") == 1
    finally:
        busy.kill()
        busy.wait(10)
    after = values(_rendered(env))
    assert value(after, "chat_active_generations") == 0
    assert value(after, "chat_websocket_connections") == 0


def _rendered(extra_env: dict) -> str:
    """/metrics' text as a fresh process renders it, one that only started Django."""
    reader = (
        "import django, sys\ndjango.setup()\nfrom monitoring.metrics import render\n"
        "sys.stdout.write(render()[0].decode())"
    )
    env = _env({"DJANGO_SETTINGS_MODULE": "chatsite.settings", **extra_env})
    command = [sys.executable, "-c", reader]
    return subprocess.run(command, env=env, check=True, timeout=60, capture_output=True, text=True).stdout


def _env(extra: dict) -> dict:
    import os

    return {**os.environ, **extra}
