"""A benchmark's users (the load test's among them) are deleted at its end even while answers the
server is still finishing record their users' usage (bench.processes.delete_users)."""

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError
from django.db.models.query import QuerySet

from bench import processes

pytestmark = pytest.mark.django_db


def test_it_collects_the_users_again_when_a_row_written_meanwhile_fails_the_deletion(monkeypatch):
    users = [get_user_model().objects.create_user(f"load-ws-{n}") for n in range(3)]
    delete, tries, pauses = QuerySet.delete, [], []

    def racing(queryset):
        tries.append(1)
        if len(tries) == 1:  # as when an answer's end records usage between collecting and committing
            raise IntegrityError('violates foreign key constraint "usage_usageday_user_id"')
        return delete(queryset)

    monkeypatch.setattr(QuerySet, "delete", racing)
    monkeypatch.setattr(processes.time, "sleep", pauses.append)
    processes.delete_users([user.pk for user in users])
    assert len(tries) == 2 and len(pauses) == 1
    assert not get_user_model().objects.filter(pk__in=[user.pk for user in users]).exists()


def test_it_gives_up_after_its_tries(monkeypatch):
    user = get_user_model().objects.create_user("load-api-1")

    def failing(queryset):
        raise IntegrityError("still referenced")

    monkeypatch.setattr(QuerySet, "delete", failing)
    monkeypatch.setattr(processes.time, "sleep", lambda seconds: None)
    with pytest.raises(IntegrityError):
        processes.delete_users([user.pk], tries=3)
