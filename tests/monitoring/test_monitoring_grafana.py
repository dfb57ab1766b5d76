"""The Prometheus scrape configuration and the Grafana dashboard in deploy/: every query of the
dashboard names a metric that the product's /metrics or a real vLLM engine's /metrics exports."""

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from monitoring import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboard.json"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"

# The sample names a family of each type puts in the exposition (a counter's family name is
# given without its _total; a histogram may itself end in _total, as vllm:iteration_tokens_total).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}
# Words that are not metrics where no parenthesis follows them: keywords, and aggregations
# written as `sum by (le) (...)`.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "and", "or", "unless", "inf", "nan", "start", "end",
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)"""
    r"|(?P<braces>\{[^}]*\})"
    r"|(?P<brackets>\[[^\]]*\])"
    r"|(?P<variable>\$\{?\w+\}?)"
    r"|(?P<grouping>\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))"
    r"|(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?)"
    r"|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?"
    r"|(?P<other>.)",
    re.S,
)
NAME_MATCHER = re.compile(r"""__name__\s*=\s*["']([^"']+)["']""")


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects: neither functions, aggregations, keywords,
    label names and values, durations, numbers nor Grafana's variables."""
    names = set()
    for token in TOKEN.finditer(expression):
        if token["braces"]:
            names.update(NAME_MATCHER.findall(token["braces"]))
        elif token["name"] and not token["call"] and token["name"] not in KEYWORDS:
            names.add(token["name"])
    return names


def exported(text: str) -> set[str]:
    """Every sample name an exposition offers, also for families that have no sample yet (a
    labelled counter before its first use still announces its name)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def dashboard_queries() -> list[str]:
    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr":
                    yield value
                else:
                    yield from walk(value)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)

    return list(walk(json.loads(DASHBOARD.read_text())))


@pytest.fixture(scope="module")
def engine_exports(engine_url) -> set[str]:
    return exported(httpx.get(engine_url + "/metrics", timeout=30).text)


@pytest.mark.django_db
def test_it_queries_only_metrics_that_the_product_or_vllm_exports(engine_exports):
    product = exported(metrics.render()[0].decode())
    queries = dashboard_queries()
    assert len(queries) >= 20
    named = {name: query for query in queries for name in metric_names(query)}
    unknown = {name: query for name, query in named.items() if name not in product | engine_exports}
    assert unknown == {}, "queries naming metrics nobody exports"
    # Both sources are drawn: the web tier's and the engine's, and bulk job progress.
    assert {"chat_time_to_first_token_seconds_bucket", "chat_bulk_jobs"} <= named.keys() & product
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc"} <= named.keys() & engine_exports


@pytest.mark.django_db
def test_it_tells_a_metric_from_its_suffixes_functions_labels_and_variables(engine_exports):
    query = (
        "histogram_quantile(0.95, sum by (le, model_name) (rate(vllm:e2e_request_latency_seconds_bucket"
        '{job="vllm", model_name=~"Smol.*"}[$__rate_interval] offset 5m))) / on (instance) group_left '
        'max(vllm:num_requests_running) > bool 1e3 and {__name__="chat_active_generations"}'
    )
    assert metric_names(query) == {
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:num_requests_running",
        "chat_active_generations",
    }
    product = exported(metrics.render()[0].decode())
    # What Prometheus stores: a counter's samples end in _total, a histogram's in _bucket, _sum, _count.
    assert "vllm:prompt_tokens_total" in engine_exports and "vllm:prompt_tokens" not in engine_exports
    assert "vllm:iteration_tokens_total_bucket" in engine_exports, "a histogram named ..._total"
    assert "chat_generations_total" in product, "a labelled counter before its first use"
    assert "chat_time_to_first_token_seconds" not in product, "a histogram has no bare sample"
    assert "chat_bulk_jobs_running" not in product | engine_exports, "a name nobody exports"


def test_it_scrapes_the_web_tier_with_its_token_and_each_engine():
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"chat-web", "vllm", "embeddings"}
    web, engine, embeddings = jobs["chat-web"], jobs["vllm"], jobs["embeddings"]
    assert web["metrics_path"] == engine["metrics_path"] == embeddings["metrics_path"] == "/metrics"
    assert web["authorization"]["type"] == "Bearer" and web["authorization"]["credentials_file"]
    assert web["static_configs"][0]["targets"] == ["127.0.0.1:8000"]
    assert engine["static_configs"][0]["targets"] == ["127.0.0.1:8100"]
    # The embedding engine asks for the engines' key (enginehost.keyguard) at EMBEDDING_URL.
    assert embeddings["authorization"] == engine["authorization"]
    assert embeddings["static_configs"][0]["targets"] == ["127.0.0.1:8200"]


def test_it_ships_a_dashboard_grafana_can_import_with_any_prometheus():
    dashboard = json.loads(DASHBOARD.read_text())
    [variable] = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(target["expr"] for target in panel["targets"]), panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
