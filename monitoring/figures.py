"""The dashboard's figures: the web tier's and the engine's metrics over a recent window.

Both sources are Prometheus text: the web tier's shared metrics, and each engine's own (with
several replicas behind the router, every replica's, shown alone and together). Each poll takes a
snapshot of both; figures are
differences between the newest snapshot and one about `MONITORING_WINDOW_SECONDS`
old, so they describe the last minute rather than the process's lifetime, and they
stay right with several web processes (the snapshots come from the shared metrics).
monitoring.history records the same figures (`figures_between` two of its own snapshots) every
few seconds, so the charts open with the last 15 minutes.
"""

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from inference.client import ReplicaMetrics
from inference.engine import engine_metrics
from monitoring import metrics
from monitoring.host import host_figures

Snapshot = dict[str, float]


@dataclass(frozen=True)
class Sample:
    at: float
    web: Snapshot
    # Each engine's metrics (None where they could not be read).
    replicas: dict[str, Snapshot | None]


def parse(text: str) -> Snapshot:
    """Sample values summed over labels (histogram buckets kept apart as `name|le`),
    and each labelled sample also alone, as `name{label=value}` for its first label."""
    values: Snapshot = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if key.endswith("_bucket") and "le" in sample.labels:
                key = f"{key}|{sample.labels['le']}"
            elif sample.labels:
                label, value = next(iter(sample.labels.items()))
                labelled = f"{key}{{{label}={value}}}"
                values[labelled] = values.get(labelled, 0.0) + sample.value
            values[key] = values.get(key, 0.0) + sample.value
    return values


KV_USE = "vllm:kv_cache_usage_perc"
# The figures that describe the moment rather than the window.
NOW = {"running", "waiting", "kv_cache_usage"}


def merged(snapshots: list[Snapshot]) -> Snapshot | None:
    """Several replicas' metrics as one engine's: counts and histograms summed, the share of the
    KV cache in use averaged."""
    if not snapshots:
        return None
    total: Snapshot = {}
    for snapshot in snapshots:
        for key, value in snapshot.items():
            total[key] = total.get(key, 0.0) + value
    total[KV_USE] = sum(snapshot.get(KV_USE, 0.0) for snapshot in snapshots) / len(snapshots)
    return total


def scrape_engine() -> tuple[list[ReplicaMetrics], dict[str, Snapshot | None]]:
    """Each engine's metrics as read, and parsed (None where they could not be read)."""
    replicas = engine_metrics()
    return replicas, {r.url: (parse(r.text) if r.text is not None else None) for r in replicas}


def histogram_quantile(q: float, name: str, new: Snapshot, old: Snapshot | None) -> float | None:
    """Prometheus' histogram_quantile over the observations between two snapshots."""
    prefix = f"{name}_bucket|"
    buckets = []
    for key, value in new.items():
        if key.startswith(prefix):
            bound = float(key[len(prefix) :])
            buckets.append((bound, value - (old or {}).get(key, 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def _rate(name: str, new: Snapshot | None, old: Snapshot | None, seconds: float | None) -> float | None:
    if new is None or old is None or not seconds or seconds <= 0:
        return None
    return max(new.get(name, 0.0) - old.get(name, 0.0), 0.0) / seconds


def _ratio(numerator: str, denominator: str, new: Snapshot | None, old: Snapshot | None) -> float | None:
    if new is None:
        return None
    old = old or {}
    queries = new.get(denominator, 0.0) - old.get(denominator, 0.0)
    if queries <= 0:
        return None
    return (new.get(numerator, 0.0) - old.get(numerator, 0.0)) / queries


def _quantile_ms(q: float, name: str, new: Snapshot | None, old: Snapshot | None) -> float | None:
    seconds = histogram_quantile(q, name, new, old) if new is not None else None
    return None if seconds is None else round(seconds * 1000, 1)


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


class Window:
    """Recent snapshots of this process, enough to reach back one window."""

    def __init__(self) -> None:
        self._samples: deque[Sample] = deque()
        self._lock = threading.Lock()

    def add(self, sample: Sample, window: float) -> Sample | None:
        """Store `sample` and return the one to compare it with (about `window` seconds older)."""
        with self._lock:
            self._samples.append(sample)
            while len(self._samples) > 2 and self._samples[1].at <= sample.at - window:
                self._samples.popleft()
            oldest = self._samples[0]
            return oldest if oldest is not sample else None


_window = Window()


def take_sample() -> tuple[Sample, list[ReplicaMetrics]]:
    """A snapshot of the web tier's and every engine's metrics, with the engines as read."""
    web_text, _ = metrics.render()
    read, replicas = scrape_engine()
    return Sample(at=time.time(), web=parse(web_text.decode()), replicas=replicas), read


def dashboard_figures() -> dict:
    """Everything the dashboard draws, over the last window (lifetime totals on the first call)."""
    sample, read = take_sample()
    base = _window.add(sample, settings.MONITORING_WINDOW_SECONDS)
    return {**figures_between(sample, base, read), "host": host_figures()}


def figures_between(sample: Sample, base: Sample | None, read: list[ReplicaMetrics]) -> dict:
    """The web tier's and the engines' figures between two samples (lifetime ones without `base`)."""
    web, old_web = sample.web, base.web if base else None
    seconds = sample.at - base.at if base else None
    ttft, gap = "chat_time_to_first_token_seconds", "chat_time_between_tokens_seconds"
    errors = [f"{r.url}: {r.error}" for r in read if r.error is not None] or (
        [] if read else ["the router lists no engines"]
    )
    replicas = sample.replicas
    engine = merged([snapshot for snapshot in replicas.values() if snapshot is not None])
    # The window's figures over the engines read both times: one that came or went in between
    # would add its lifetime counts to the window, or take them away.
    old = base.replicas if base else {}
    both = [url for url, snapshot in replicas.items() if snapshot is not None and old.get(url) is not None]
    windowed = engine_figures(
        merged([replicas[url] for url in both]) if base else engine,
        merged([old[url] for url in both]),
        seconds,
    )
    return {
        "time": sample.at,
        "window_seconds": round(seconds, 1) if base else None,
        "web": {
            "ttft_p50_ms": _quantile_ms(0.5, ttft, web, old_web),
            "ttft_p95_ms": _quantile_ms(0.95, ttft, web, old_web),
            "token_gap_p50_ms": _quantile_ms(0.5, gap, web, old_web),
            "token_gap_p99_ms": _quantile_ms(0.99, gap, web, old_web),
            "tokens_per_second": _round(_rate("chat_streamed_tokens_total", web, old_web, seconds)),
            "active_generations": web.get("chat_active_generations", 0.0),
            "websocket_connections": web.get("chat_websocket_connections", 0.0),
            "running_jobs": web.get("chat_bulk_jobs{status=running}", 0.0),
            "queued_jobs": web.get("chat_bulk_jobs{status=queued}", 0.0),
            "job_documents_done": web.get("chat_bulk_job_documents{status=done}", 0.0),
            "job_documents_total": web.get("chat_bulk_job_documents", 0.0),
            "circuit_state": web.get("chat_engine_circuit_state", 0.0),
            "engine_errors": web.get("chat_engine_errors_total", 0.0),
            "admissions_refused": web.get("chat_admissions_refused_total", 0.0),
        },
        "engine": {
            "up": engine is not None,
            "error": "; ".join(errors) or None,
            **windowed,
            # What runs now, on every engine that answers.
            **{key: value for key, value in engine_figures(engine, None, None).items() if key in NOW},
        },
        # Each engine alone: the router's replicas (with its view of their health), or the one engine.
        "replicas": [
            {
                "url": r.url,
                "healthy": r.healthy,
                "up": replicas[r.url] is not None,
                "error": r.error,
                **engine_figures(replicas[r.url], old.get(r.url), seconds),
            }
            for r in read
        ],
    }


def engine_figures(new: Snapshot | None, old: Snapshot | None, seconds: float | None) -> dict:
    """One engine's figures (or every replica's together) between two snapshots."""
    ttft = "vllm:time_to_first_token_seconds"
    return {
        "running": new.get("vllm:num_requests_running") if new else None,
        "waiting": new.get("vllm:num_requests_waiting") if new else None,
        "kv_cache_usage": _round(new.get(KV_USE), 4) if new else None,
        "prefix_cache_hit_rate": _round(
            _ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", new, old), 4
        ),
        "tokens_per_second": _round(_rate("vllm:generation_tokens_total", new, old, seconds)),
        "ttft_p50_ms": _quantile_ms(0.5, ttft, new, old),
        "ttft_p95_ms": _quantile_ms(0.95, ttft, new, old),
    }
