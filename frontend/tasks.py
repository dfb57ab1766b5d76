from celery import shared_task

from frontend import services


@shared_task(soft_time_limit=30, time_limit=60)
def sweep_stale_answers() -> int:
    """Mark answers whose web process died as interrupted (see frontend.generation)."""
    return services.messages_interrupt_stale()
