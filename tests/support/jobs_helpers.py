"""Staff users and jobs for the bulk-job tests."""

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from jobs import services
from jobs.ingest import DocumentInput
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
