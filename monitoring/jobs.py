"""Bulk job progress for /metrics, read from the database at scrape time.

The jobs app keeps progress in the database (its source of truth), and its work runs
in Celery workers, not in the web process: reading the counts here needs no metric
hooks in the workers and no shared metrics directory, and stays right across restarts.
Two grouped counts per scrape, on indexed columns.
"""

import logging

from django.db import DatabaseError
from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from jobs.models import Document, Job

log = logging.getLogger(__name__)


class BulkJobsCollector:
    def collect(self):
        jobs = GaugeMetricFamily(
            "chat_bulk_jobs", "Bulk jobs queued or running, by status.", labels=["status"]
        )
        documents = GaugeMetricFamily(
            "chat_bulk_job_documents",
            "Documents of queued and running bulk jobs, by status: their progress.",
            labels=["status"],
        )
        try:
            job_counts = dict(
                Job.objects.filter(status__in=Job.ACTIVE).values_list("status").annotate(n=Count("id"))
            )
            document_counts = dict(
                Document.objects.filter(job__status__in=Job.ACTIVE)
                .values_list("status")
                .annotate(n=Count("id"))
            )
        except DatabaseError:
            log.warning("bulk job metrics: the database did not answer", exc_info=True)
            return
        for status in Job.ACTIVE:
            jobs.add_metric([status], job_counts.get(status, 0))
        for status in Document.Status.values:
            documents.add_metric([status], document_counts.get(status, 0))
        yield jobs
        yield documents
