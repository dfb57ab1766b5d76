import atexit
import os

from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"

    def ready(self) -> None:
        from monitoring import checks  # noqa: F401 - registers the system checks
        from monitoring.metrics import multiprocess_enabled

        if multiprocess_enabled():
            from prometheus_client import multiprocess

            # Drops this process's live gauges (connections, active streams) from the
            # shared directory when it exits, so the sum covers running processes only.
            atexit.register(multiprocess.mark_process_dead, os.getpid())
