"""/metrics' exposition: the metrics the apps own (frontend.metrics, inference.metrics) and
bulk job progress, read from the database at scrape time (monitoring.jobs).

Several web processes share one view when PROMETHEUS_MULTIPROC_DIR is set before
they start: prometheus_client then writes every value to memory-mapped files in
that directory and `render()` sums them. Without it each process exposes only its
own figures. docs/monitoring.md has the details.
"""

import os

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

# Imported for their metrics: a process that has not used them yet still exposes them.
from frontend import metrics as chat_metrics  # noqa: F401
from inference import metrics as engine_metrics  # noqa: F401
from monitoring.jobs import BulkJobsCollector


def multiprocess_enabled() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class _Exposition:
    """This process's metrics (every process's in multiprocess mode) and bulk job progress."""

    def collect(self):
        if multiprocess_enabled():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        else:
            registry = REGISTRY
        yield from registry.collect()
        yield from BulkJobsCollector().collect()


def render() -> tuple[bytes, str]:
    """The exposition text for /metrics and its content type."""
    return generate_latest(_Exposition()), CONTENT_TYPE_LATEST
