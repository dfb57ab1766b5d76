"""A cancel and a runner recording its documents lock the documents' rows in one order, by id: taken in
different orders, the two transactions deadlock on PostgreSQL and the cancel fails (a 500 for the user).
Checked on the statements each sends; SQLite has no row locks."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import claims, services
from jobs.models import Document
from tests.support.jobs_helpers import queued_job

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL"),
]


def first_touch_of_documents(queries) -> str:
    """The first statement that reads for update or writes the documents' rows."""
    return next(
        q["sql"]
        for q in queries
        if '"jobs_document"' in q["sql"] and ("FOR UPDATE" in q["sql"] or q["sql"].startswith("UPDATE"))
    )


def locks_by_id(sql: str) -> bool:
    # The ids alone selected, ordered by the first column (or by name).
    return sql.endswith("FOR UPDATE") and bool(
        re.search(r'^SELECT "jobs_document"."id" AS "pk" .* ORDER BY (1|"jobs_document"."id") ASC', sql)
    )


def running_job():
    job = queued_job({f"doc-{i}.txt": f"text {i}" for i in range(4)})
    Document.objects.filter(job=job).update(status=Document.Status.RUNNING, claimed_by="w/1", attempts=1)
    return job


def test_a_cancel_locks_the_documents_by_id_before_it_changes_them():
    job = running_job()
    with CaptureQueriesContext(connection) as queries:
        services.job_cancel(job=job)
    first = first_touch_of_documents(queries.captured_queries)
    assert locks_by_id(first), first
    assert set(Document.objects.filter(job=job).values_list("status", flat=True)) == {"cancelled"}


def test_a_runner_locks_every_document_it_records_by_id_before_it_changes_them():
    job = running_job()
    ids = sorted(Document.objects.filter(job=job).values_list("pk", flat=True), reverse=True)
    outcomes = [claims.Failed(ids[0], "boom", retryable=False), claims.Released(ids[1])]
    with CaptureQueriesContext(connection) as queries:
        claims.documents_record(worker="w/1", outcomes=outcomes)
    first = first_touch_of_documents(queries.captured_queries)
    assert locks_by_id(first), first
    assert Document.objects.get(pk=ids[0]).status == "failed"
