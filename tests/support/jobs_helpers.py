"""Staff users and jobs for the bulk-job tests, and waiting for a job to end."""

import time

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from documents.uploads import DocumentInput
from jobs import selectors, services
from jobs.models import Job


def staff_user(username: str = "staff"):
    User = get_user_model()
    user, _ = User.objects.get_or_create(username=username, defaults={"is_staff": True})
    return user


def queued_job(texts: dict[str, str], **kwargs) -> Job:
    """A job ready for a runner, without sending its task to the broker."""
    job = services.job_create(
        owner=staff_user(),
        documents=[DocumentInput(key, text=text) for key, text in texts.items()],
        start=False,
        **kwargs,
    )
    Job.objects.filter(pk=job.pk).update(status=Job.Status.QUEUED)
    return job


aqueued_job = sync_to_async(queued_job)


def wait_finished(job: Job, timeout: float, on_tick=None) -> Job:
    """The job once it has ended, read again every 200 ms (`on_tick` runs between reads); fails
    with its progress after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status not in Job.ACTIVE:
            return job
        if on_tick is not None:
            on_tick()
        time.sleep(0.2)
    raise AssertionError(
        f"job {job.pk} still {job.status} after {timeout}s: {selectors.job_progress(job=job)}"
    )
