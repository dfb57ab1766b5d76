"""/metrics' exposition: the metrics the apps own and bulk job progress, read from the database
at scrape time (monitoring.jobs). Each app registers its own metrics when it starts (its
AppConfig.ready loads its metrics module: answers.metrics, chat.metrics, inference.metrics),
so a process that has not used them yet still exposes them; monitoring only reads the registry.

Several web processes share one view when PROMETHEUS_MULTIPROC_DIR is set before
they start: prometheus_client then writes every value to memory-mapped files in
that directory and `render()` sums them. Without it each process exposes only its
own figures. docs/monitoring.md has the details.

The live gauges (answers streaming, open sockets) count running processes only: a process that
exits drops its own files (monitoring.apps), and one that could not (SIGKILL, the OOM killer) has
them dropped at the next scrape, as prometheus_client asks of whatever supervises the processes.
"""

import glob
import os

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

from monitoring.jobs import BulkJobsCollector


def multiprocess_enabled() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def prune_dead_processes(directory: str) -> None:
    """Drop the live gauges of the processes that died without dropping their own."""
    for path in glob.glob(os.path.join(directory, "gauge_live*_*.db")):
        pid = os.path.basename(path)[: -len(".db")].rsplit("_", 1)[1]
        if pid.isdigit() and not _alive(int(pid)):
            multiprocess.mark_process_dead(int(pid), directory)


class _Exposition:
    """This process's metrics (every process's in multiprocess mode) and bulk job progress."""

    def collect(self):
        if multiprocess_enabled():
            prune_dead_processes(os.environ["PROMETHEUS_MULTIPROC_DIR"])
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        else:
            registry = REGISTRY
        yield from registry.collect()
        yield from BulkJobsCollector().collect()


def render() -> tuple[bytes, str]:
    """The exposition text for /metrics and its content type."""
    return generate_latest(_Exposition()), CONTENT_TYPE_LATEST
