"""Start-up checks for monitoring settings."""

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_monitoring(app_configs, **kwargs) -> list[Error]:
    errors = []
    if settings.LOG_FORMAT not in settings.LOGGING["formatters"]:
        errors.append(
            Error(f"LOG_FORMAT={settings.LOG_FORMAT!r}: expected 'plain' or 'json'", id="monitoring.E001")
        )
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
