"""Start-up checks of rules across several settings: a heartbeat and a takeover that would hand a
live answer over, or a stream that would expire before its answer ends, stop `manage.py migrate`
and `check` (which `make run` and the Kubernetes migrate job run first) with the rule broken.
Each app checks its own settings beside these (jobs/checks.py, monitoring/checks.py)."""

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_answer_timing(app_configs, **kwargs) -> list[Error]:
    errors = []
    takeover, heartbeat = settings.CHAT_TAKEOVER_AFTER_SECONDS, settings.CHAT_HEARTBEAT_SECONDS
    if takeover < 2 * heartbeat:
        errors.append(
            Error(
                f"CHAT_TAKEOVER_AFTER_SECONDS={takeover:g} must be at least twice "
                f"CHAT_HEARTBEAT_SECONDS={heartbeat:g}",
                hint="One late heartbeat must not hand a live answer to another process.",
                id="chatsite.E001",
            )
        )
    ttl, total = settings.CHAT_STREAM_TTL_SECONDS, settings.CHAT_TOTAL_TIMEOUT
    if ttl <= total:
        errors.append(
            Error(
                f"CHAT_STREAM_TTL_SECONDS={ttl} must exceed CHAT_TOTAL_TIMEOUT={total:g}",
                hint="An answer's stream must outlive the longest answer, so a reader can resume it.",
                id="chatsite.E002",
            )
        )
    return errors
