"""The dashboard's history: Celery beat queues a point every SAMPLE_SECONDS (monitoring.history;
the entry "monitoring-history" of CELERY_BEAT_SCHEDULE). A point that waited in the queue longer
than one interval is dropped, not recorded late (the entry's `expires`).
"""

from celery import shared_task

from monitoring import history


@shared_task(soft_time_limit=history.SAMPLE_SECONDS * 2, time_limit=history.SAMPLE_SECONDS * 3)
def record_history() -> bool:
    """Record the dashboard's figures now; False when another writer just did."""
    return history.history_record() is not None
