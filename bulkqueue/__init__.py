"""What every task on the bulk queue shares (bulk jobs' runs, collections' indexing): the queue's name and
the Celery options of a long task delivered at least once.

Late acknowledgement and rejection on a lost worker put a killed worker's task back; the database or
Redis briefly away retries the whole run later with backoff; the soft and hard time limits (the settings'
BULK_TASK_*) sit below the broker's visibility timeout, so a task never runs twice at once. A task run
twice is safe because each room claims its work under leases and writes each result once.
"""

from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError

# settings.CELERY_TASK_ROUTES sends the bulk rooms' tasks to this queue.
QUEUE = "bulk"

LONG_TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": (DatabaseError, RedisError),
    "retry_backoff": True,
    "max_retries": 10,
    "soft_time_limit": settings.BULK_TASK_SOFT_TIME_LIMIT,
    "time_limit": settings.BULK_TASK_TIME_LIMIT,
}
# A short task of the queue's own upkeep (a worker's recovery, a sweep).
SHORT_TASK_OPTIONS = {"acks_late": True, "soft_time_limit": 60, "time_limit": 90}
