"""Start-up checks: time limits that would let the broker redeliver a running task,
or concurrency bounds that contradict each other, stop the process with a clear message."""

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_bulk_settings(app_configs, **kwargs) -> list[Error]:
    errors = []
    slice_, soft, hard, visibility = (
        settings.BULK_TASK_SLICE_SECONDS,
        settings.BULK_TASK_SOFT_TIME_LIMIT,
        settings.BULK_TASK_TIME_LIMIT,
        settings.BULK_VISIBILITY_TIMEOUT,
    )
    if not slice_ < soft < hard < visibility:
        errors.append(
            Error(
                "Need BULK_TASK_SLICE_SECONDS < BULK_TASK_SOFT_TIME_LIMIT < BULK_TASK_TIME_LIMIT "
                f"< BULK_VISIBILITY_TIMEOUT, got {slice_}, {soft}, {hard}, {visibility}",
                hint="A task running past the visibility timeout is delivered twice.",
                id="jobs.E001",
            )
        )
    if settings.BULK_CONCURRENCY_MIN > settings.BULK_CONCURRENCY:
        errors.append(Error("BULK_CONCURRENCY_MIN exceeds BULK_CONCURRENCY", id="jobs.E002"))
    if settings.BULK_CONCURRENCY_MIN > settings.BATCH_CONCURRENCY:
        errors.append(Error("BULK_CONCURRENCY_MIN exceeds BATCH_CONCURRENCY", id="jobs.E004"))
    if settings.BULK_MAX_SUMMARY_TOKENS * 2 > settings.BULK_CHUNK_TOKENS:
        errors.append(
            Error(
                "BULK_MAX_SUMMARY_TOKENS must be at most half of BULK_CHUNK_TOKENS",
                hint="Otherwise the summaries of a long document's chunks may not shrink it.",
                id="jobs.E003",
            )
        )
    return errors
