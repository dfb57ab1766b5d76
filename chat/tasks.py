from celery import shared_task

from chat import sweeper


@shared_task(soft_time_limit=30, time_limit=60)
def sweep_stale_answers() -> int:
    """Mark answers whose web process died as interrupted (see chat.generation)."""
    return sweeper.messages_interrupt_stale()


# frontend: the sweep's name before the chat's package was renamed from frontend/ to chat/. A
# sweep a broker still holds under that name (queued before the upgrade) runs the same task.
shared_task(name="frontend.tasks.sweep_stale_answers", soft_time_limit=30, time_limit=60)(
    sweep_stale_answers.run
)
