"""The staff dashboard: staff only, live charts from a JSON endpoint of web-tier and engine figures."""

import re
import subprocess
import sys

import psutil
import pytest
from django.contrib.auth import get_user_model

from tests.chat_client import session_cookie

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
ENGINE_FIELDS = {
    "up",
    "error",
    "running",
    "waiting",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "tokens_per_second",
    "ttft_p50_ms",
    "ttft_p95_ms",
}


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


@pytest.mark.django_db(transaction=True)
def test_it_redraws_the_charts_by_itself_in_a_browser(page, product_server, staff):
    page.context.add_cookies([{"name": "sessionid", "value": session_cookie(staff), "url": product_server}])
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(product_server + "/monitoring/")
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
