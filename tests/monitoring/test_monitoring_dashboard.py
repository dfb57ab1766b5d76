"""The staff dashboard: staff only, live charts from a JSON endpoint of web-tier and engine figures,
opening with the last 15 minutes that Celery beat has recorded in Redis, in the product's theme."""

import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from django.contrib.auth import get_user_model

import redisconn
from harness.processes import ROOT
from harness.waiting import wait_for
from monitoring import history
from tests.support.chat_client import session_cookie
from tests.support.product import LOGS, product_env

pytestmark = pytest.mark.django_db

WEB_FIELDS = {
    "ttft_p50_ms",
    "ttft_p95_ms",
    "token_gap_p50_ms",
    "token_gap_p99_ms",
    "tokens_per_second",
    "active_generations",
    "websocket_connections",
    "running_jobs",
    "queued_jobs",
    "job_documents_done",
    "job_documents_total",
    "circuit_state",
    "engine_errors",
    "admissions_refused",
}
# The engine's live figures: those the history keeps, and two it leaves out.
ENGINE_FIELDS = {*history.ENGINE, "error", "ttft_p95_ms"}


@pytest.fixture
def staff():
    return get_user_model().objects.create_user("watcher", password="pw-watcher-123", is_staff=True)


@pytest.fixture
def member():
    return get_user_model().objects.create_user("member", password="pw-member-123")


@pytest.mark.parametrize("path", ["/monitoring/", "/monitoring/data.json"])
def test_it_sends_anonymous_and_non_staff_users_to_the_login(client, member, path):
    assert client.get(path).status_code == 302
    client.force_login(member)
    response = client.get(path)
    assert response.status_code == 302
    assert "login" in response["Location"]


def test_it_serves_the_page_with_charts_and_no_inline_script(client, staff):
    client.force_login(staff)
    response = client.get("/monitoring/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'src="/static/monitoring/dashboard.js"' in html
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script"
    assert html.count('class="chart"') >= 6
    assert "cdn" not in html.lower()


def test_it_combines_web_tier_and_engine_figures(client, staff, engine_url, settings):
    settings.INFERENCE_URL = engine_url
    client.force_login(staff)
    first = client.get("/monitoring/data.json").json()
    second = client.get("/monitoring/data.json").json()
    for body in (first, second):
        assert set(body["web"]) == WEB_FIELDS
        assert set(body["engine"]) == ENGINE_FIELDS
        assert body["engine"]["up"] is True
        assert body["engine"]["running"] == 0
        assert 0 <= body["engine"]["kv_cache_usage"] <= 1
        [alone] = body["replicas"]
        assert (alone["url"], alone["healthy"], alone["up"], alone["running"]) == (engine_url, None, True, 0)
    assert second["window_seconds"] is not None
    assert second["web"]["tokens_per_second"] == 0


def test_it_reports_an_unreachable_engine_instead_of_failing(client, staff, settings):
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    client.force_login(staff)
    body = client.get("/monitoring/data.json").json()
    assert body["engine"]["up"] is False
    assert body["engine"]["error"]
    assert body["engine"]["running"] is None
    assert set(body["web"]) == WEB_FIELDS


def open_dashboard(page, product_server: str, staff) -> list[str]:
    """Open the dashboard as `staff`; the list fills with the page's script errors."""
    page.context.add_cookies([{"name": "sessionid", "value": session_cookie(staff), "url": product_server}])
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(product_server + "/monitoring/")
    return errors


@pytest.mark.django_db(transaction=True)
def test_it_redraws_the_charts_by_itself_in_a_browser(page, product_server, staff):
    errors = open_dashboard(page, product_server, staff)
    page.wait_for_function(
        "() => Number(document.getElementById('dashboard').dataset.updates || 0) >= 2", timeout=30000
    )
    assert page.locator("figure.chart canvas").count() >= 6
    assert "engine up" in page.locator("#status").inner_text()
    assert page.locator("figure.chart .legend span").count() >= 10
    # The product's processes on this host: the engine and this daphne at least.
    names = page.locator("#processes tbody tr td:nth-child(2)").all_inner_texts()
    assert any("vllm" in n for n in names) and any("daphne" in n for n in names), names
    assert page.locator("#no-gpu").is_visible() == (host_gpus() is None)
    # The engine table: the one engine, no router to judge its health.
    [engine] = page.locator("#replicas tbody tr").all()
    cells = engine.locator("td").all_inner_texts()
    assert cells[0].startswith("http://127.0.0.1:") and cells[1] == "–" and cells[2] == "0", cells
    assert errors == []


def host_gpus():
    from monitoring.host import gpus

    return gpus()


def test_it_reports_the_hosts_cpu_memory_and_the_products_processes(client, staff):
    # A process of the product's kind: its command line names daphne.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "daphne-probe"])
    try:
        client.force_login(staff)
        host = client.get("/monitoring/data.json").json()["host"]
        assert host["cpus"] == psutil.cpu_count()
        assert 0 < host["memory_used_mib"] < host["memory_total_mib"]
        [probe] = [p for p in host["processes"] if p["pid"] == child.pid]
        assert "daphne-probe" in probe["name"] and probe["rss_mib"] > 1
        assert all(set(p) == {"pid", "name", "cpu_percent", "rss_mib"} for p in host["processes"])
    finally:
        child.kill()
        child.wait()


def test_it_measures_the_hosts_cpu_between_polls_answered_by_different_threads():
    """The web process answers each poll in a new thread; the CPU figure spans the polls anyway."""
    from monitoring.host import host_figures

    with ThreadPoolExecutor(1) as first, ThreadPoolExecutor(1) as second:
        first.submit(host_figures).result()
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            pass  # busy: the host's CPU is in use between the two polls
        assert 0 < second.submit(host_figures).result()["cpu_percent"] <= 100


def test_it_leaves_gpu_figures_out_without_nvml_and_reads_them_with_it(monkeypatch):
    import pynvml

    from monitoring import host

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert host.gpus() is None
    # The mapping of NVML's answers, with its calls standing in for a driver this host lacks.
    memory = type("Memory", (), {"used": 3 * 1024**3, "total": 80 * 1024**3})
    rates = type("Rates", (), {"gpu": 57})
    for name, value in {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: f"gpu{i}",
        "nvmlDeviceGetMemoryInfo": lambda h: memory,
        "nvmlDeviceGetUtilizationRates": lambda h: rates,
        "nvmlDeviceGetName": lambda h: "H200",
        "nvmlDeviceGetTemperature": lambda h, sensor: 41,
    }.items():
        monkeypatch.setattr(pynvml, name, value)
    assert host.gpus() == [
        {
            "index": 0,
            "name": "H200",
            "utilisation_percent": 57,
            "memory_used_mib": 3072,
            "memory_total_mib": 81920,
            "temperature_c": 41,
        }
    ]


@pytest.fixture
def no_history():
    """An empty ring: the suite's Redis database is emptied once per session, not per test."""
    r = redisconn.sync_client()
    keys = (history.HISTORY_KEY, history.LAST_SAMPLE_KEY, history.WRITER_LOCK_KEY)
    r.delete(*keys)
    yield r
    r.delete(*keys)


def test_it_records_a_point_per_interval_measured_from_the_last_snapshot(no_history, engine_url, settings):
    settings.INFERENCE_URL = engine_url
    r = no_history
    assert history.history_record() is None, "the first call only keeps a snapshot to measure from"
    assert r.exists(history.LAST_SAMPLE_KEY) and r.zcard(history.HISTORY_KEY) == 0
    time.sleep(0.5)
    point = history.history_record()
    assert set(point) == {"time", "window_seconds", "web", "engine", "host"}
    assert 0.4 < point["window_seconds"] < 5
    assert point["engine"]["up"] is True and point["engine"]["running"] == 0
    assert point["engine"]["tokens_per_second"] == 0
    assert set(point["web"]) == set(history.WEB) and set(point["engine"]) == set(history.ENGINE)
    assert history.history_record() is None, "a point that recent is not written twice"
    assert history.history_points() == [point]
    assert 0 < r.ttl(history.HISTORY_KEY) <= history.HISTORY_SECONDS


def test_it_keeps_fifteen_minutes_and_one_writer_at_a_time(no_history, settings):
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    r = no_history
    now = time.time()
    stale = {"time": now - history.HISTORY_SECONDS - 5}
    recent = {"time": now - history.SAMPLE_SECONDS}
    r.zadd(history.HISTORY_KEY, {json.dumps(stale): stale["time"], json.dumps(recent): recent["time"]})
    holder = r.lock(history.WRITER_LOCK_KEY, timeout=30)
    assert holder.acquire(blocking=False)
    assert history.history_record() is None, "another writer holds the lock"
    holder.release()
    history.history_record()
    point = history.history_record()
    assert point["engine"]["up"] is False and point["engine"]["running"] is None
    assert [p["time"] for p in history.history_points()] == [recent["time"], point["time"]]


def test_it_leaves_the_web_tier_out_of_a_point_where_it_sees_one_process_only():
    figures = {
        "time": 1.0,
        "window_seconds": 10.0,
        "web": {key: 2.0 for key in history.WEB} | {"engine_errors": 1.0},
        "engine": {key: 3.0 for key in history.ENGINE} | {"error": None},
    }
    alone = history.history_point(figures, None, sees_web_tier=False)
    assert alone["web"] == {key: (None if key in history.WEB_PER_PROCESS else 2.0) for key in history.WEB}
    assert alone["web"]["running_jobs"] == 2.0, "bulk jobs come from the database"
    assert alone["host"] is None and alone["engine"] == {key: 3.0 for key in history.ENGINE}
    shared = history.history_point(figures, {"cpu_percent": 12.5}, sees_web_tier=True)
    assert shared["web"] == {key: 2.0 for key in history.WEB} and shared["host"] == {"cpu_percent": 12.5}


def test_it_serves_the_history_with_the_first_poll_only_when_asked(client, staff, no_history, settings):
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    point = {"time": time.time() - 30, "web": {}, "engine": {}, "host": None}
    no_history.zadd(history.HISTORY_KEY, {json.dumps(point): point["time"]})
    client.force_login(staff)
    assert "history" not in client.get("/monitoring/data.json").json()
    body = client.get("/monitoring/data.json?history=1").json()
    assert body["history"] == [point] and set(body["web"]) == WEB_FIELDS


def test_it_says_so_when_redis_cannot_give_the_history(client, staff, settings):
    client.force_login(staff)  # while Redis answers: a login clears the user's throttle window there
    settings.INFERENCE_URL = "http://127.0.0.1:1"
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    response = client.get("/monitoring/data.json?history=1")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "history_unavailable" and "Redis did not answer" in error["detail"]
    # Named by kind: the exception's own text (the server's address here) is not shown.
    assert "ConnectionError" in error["detail"] and "127.0.0.1" not in error["detail"]


@pytest.mark.django_db(transaction=True)
def test_it_records_the_history_from_celery_beat_through_a_worker(no_history, engine_url, tmp_path):
    """`make run`'s beat and worker, sharing the web processes' metrics directory: points arrive
    every SAMPLE_SECONDS with the engine's, the web tier's and the host's figures."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = product_env(engine_url, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir))
    commands = {
        "beat": ["beat", "--schedule", str(tmp_path / "schedule"), "--max-interval", "1"],
        "worker": ["worker", "--hostname", "monitoring-test@%h", "--concurrency", "1", "--without-gossip"],
    }
    processes = []
    try:
        for name, command in commands.items():
            log = open(LOGS / f"test-monitoring-{name}.log", "w")  # noqa: SIM115 - closed with the process
            processes.append(
                (
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "--app", "chatsite", *command, "--loglevel", "INFO"],
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    ),
                    log,
                )
            )
        wait_for(
            lambda: no_history.zcard(history.HISTORY_KEY) >= 1, 4 * history.SAMPLE_SECONDS + 30, "a point"
        )
    finally:
        for process, log in processes:
            process.terminate()
            process.wait(30)
            log.close()
        no_history.delete("celery")
    [point] = history.history_points()
    assert point["engine"]["up"] is True and point["engine"]["running"] == 0
    assert point["web"]["tokens_per_second"] == 0 and point["web"]["active_generations"] == 0
    assert 0 <= point["host"]["cpu_percent"] <= 100
    assert history.SAMPLE_SECONDS - 2 <= point["window_seconds"] <= 2 * history.SAMPLE_SECONDS


def seed_history(r, seconds: float, running: int) -> list[float]:
    """Points as the recorder writes them, one per SAMPLE_SECONDS over the last `seconds`."""
    now = time.time()
    times = [
        now - seconds + i * history.SAMPLE_SECONDS for i in range(int(seconds // history.SAMPLE_SECONDS))
    ]
    web = {key: 1.0 for key in history.WEB}
    engine = {key: float(running) for key in history.ENGINE} | {"up": True, "kv_cache_usage": 0.25}
    points = {
        json.dumps(
            {"time": t, "window_seconds": 10.0, "web": web, "engine": engine, "host": {"cpu_percent": 40.0}}
        ): t
        for t in times
    }
    r.zadd(history.HISTORY_KEY, points)
    return times


@pytest.mark.django_db(transaction=True)
def test_it_opens_with_the_last_fifteen_minutes_drawn(page, product_server, staff, no_history):
    times = seed_history(no_history, history.HISTORY_SECONDS - 20, running=3)
    errors = open_dashboard(page, product_server, staff)
    page.wait_for_function(
        "() => document.getElementById('dashboard').dataset.updates === '1'", timeout=30000
    )
    assert page.locator("#dashboard").get_attribute("data-history-points") == str(len(times))
    # After one poll, each chart holds the recorded points and the live one, 15 minutes wide.
    for figure in page.locator("figure.chart").all():
        assert figure.get_attribute("data-points") == str(len(times) + 1)
        assert int(figure.get_attribute("data-seconds")) >= history.HISTORY_SECONDS - 30
    assert "History: " in page.locator("#history-status").inner_text()
    assert errors == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "scheme, panel, page_background",
    [("light", "rgb(255, 255, 255)", "rgb(247, 247, 248)"), ("dark", "rgb(32, 33, 39)", "rgb(23, 24, 28)")],
)
def test_it_draws_its_tables_in_the_products_theme(
    page, product_server, staff, no_history, scheme, panel, page_background
):
    page.emulate_media(color_scheme=scheme)
    open_dashboard(page, product_server, staff)
    page.wait_for_function("() => Number(document.getElementById('dashboard').dataset.updates || 0) >= 1")
    assert page.locator('link[href="/static/frontend/chat.css"]').count() == 1
    assert page.eval_on_selector("body", "(el) => getComputedStyle(el).backgroundColor") == page_background
    background = "(el) => getComputedStyle(el.closest('section')).backgroundColor"
    assert page.eval_on_selector("#replicas", background) == panel
    assert page.eval_on_selector("#top-users, .top-users", background) == panel
    # Figures right-aligned as on the usage page; the engine's name left.
    aligns = page.eval_on_selector_all(
        "#replicas tbody tr:first-child td", "(cells) => cells.map((c) => getComputedStyle(c).textAlign)"
    )
    assert aligns[0] == "left" and set(aligns[2:]) == {"right"}
