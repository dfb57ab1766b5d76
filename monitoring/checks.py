"""Start-up checks for monitoring settings."""

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, Warning, register


@register()
def check_monitoring(app_configs, **kwargs) -> list[Error]:
    errors = []
    directory = settings.PROMETHEUS_MULTIPROC_DIR
    if directory and not Path(directory).is_dir():
        errors.append(
            Error(
                f"PROMETHEUS_MULTIPROC_DIR={directory!r} is not a directory",
                hint="Create it (empty) before starting the web and worker processes.",
                id="monitoring.E002",
            )
        )
    return errors


@register(deploy=True)
def check_metrics_token(app_configs, **kwargs) -> list[Warning]:
    if settings.DEBUG or settings.MONITORING_METRICS_TOKEN:
        return []
    return [
        Warning(
            "MONITORING_METRICS_TOKEN is not set: /metrics and /healthz's details answer private addresses",
            hint="Set it to scrape /metrics from anywhere with 'Authorization: Bearer <token>'.",
            id="monitoring.W001",
        )
    ]
