"""Admin list actions need the permission to change what they act on: a staff member who may
only view jobs and tokens sees no action and cannot run one by posting it."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from apitokens.models import ApiToken
from apitokens.services import token_issue
from jobs.models import Job
from tests.support.jobs_helpers import queued_job

pytestmark = pytest.mark.django_db

CASES = [
    ("/admin/jobs/job/", "start_jobs"),
    ("/admin/jobs/job/", "cancel_jobs"),
    ("/admin/jobs/job/", "retry_failed"),
    ("/admin/apitokens/apitoken/", "revoke"),
]


def staff_with(*codenames: str) -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-viewer-123", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def state() -> tuple:
    return tuple(Job.objects.values_list("status", flat=True)), tuple(
        ApiToken.objects.values_list("revoked_at", flat=True)
    )


@pytest.mark.parametrize("url, action", CASES)
def test_a_view_only_staff_member_cannot_run_an_admin_action(url, action):
    job = queued_job({"a": "Some text."})
    token, _ = token_issue(user=job.owner, scopes=["chat"])
    client = staff_with("view_job", "view_apitoken")
    page = client.get(url)
    assert page.status_code == 200
    assert f'value="{action}"' not in page.content.decode()
    before = state()
    selected = job.pk if "jobs" in url else token.pk
    client.post(url, {"action": action, ACTION_CHECKBOX_NAME: [selected], "index": 0})
    assert state() == before


@pytest.mark.parametrize("url, action", CASES)
def test_a_staff_member_who_may_change_sees_the_action(url, action):
    client = staff_with("view_job", "change_job", "view_apitoken", "change_apitoken")
    queued_job({"a": "Some text."})
    token_issue(user=get_user_model().objects.get(username="staff"), scopes=["chat"])
    assert f'value="{action}"' in client.get(url).content.decode()
