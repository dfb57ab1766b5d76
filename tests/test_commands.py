"""Management commands that `make run` relies on."""

from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from harness.processes import free_port
from inference.model import is_prepared


@pytest.mark.django_db
def test_it_creates_the_demo_and_staff_users_once(settings):
    out = StringIO()
    call_command("bootstrap_users", stdout=out)
    User = get_user_model()
    demo = User.objects.get(username=settings.DEMO_USERNAME)
    staff = User.objects.get(username=settings.STAFF_USERNAME)
    assert demo.check_password(settings.DEMO_PASSWORD) and not demo.is_staff
    assert staff.check_password(settings.STAFF_PASSWORD) and staff.is_staff
    assert settings.DEMO_PASSWORD in out.getvalue()
    again = StringIO()
    call_command("bootstrap_users", stdout=again)
    assert User.objects.count() == 2
    assert "exists" in again.getvalue()


@pytest.fixture
def redis_not_running_yet(settings):
    """The channel layer at a port nothing listens on: `make run` makes its users before it starts Redis."""
    settings.CHANNEL_LAYERS = {
        "default": {
            **settings.CHANNEL_LAYERS["default"],
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},
        }
    }


@pytest.mark.django_db
def test_it_creates_the_users_before_redis_runs(redis_not_running_yet, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        call_command("bootstrap_users", stdout=StringIO())
    # Made in one save each: nothing for open sockets to hear, so nothing waits for Redis.
    assert callbacks == []
    assert (
        get_user_model().objects.get(username=settings.DEMO_USERNAME).check_password(settings.DEMO_PASSWORD)
    )


@pytest.mark.django_db
def test_a_password_changes_while_redis_is_down_and_the_miss_is_logged(
    redis_not_running_yet, django_capture_on_commit_callbacks, caplog
):
    user = get_user_model().objects.create_user("rita", password="pw-rita-12345")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        user.set_password("pw-rita-67890")
        user.save()
    assert len(callbacks) == 1  # the open sockets' recheck, which could not be sent
    assert get_user_model().objects.get(pk=user.pk).check_password("pw-rita-67890")
    assert f"could not tell the sockets of user-{user.pk} to session.recheck" in caplog.text


def test_it_prepares_the_default_model_once():
    from pathlib import Path

    target = Path(settings.INFERENCE_MODEL)
    assert is_prepared(target), "make test prepares the model before the suite"
    out = StringIO()
    call_command("prepare_model", stdout=out)
    assert "already prepared" in out.getvalue()
    assert (target / "config.json").exists() and (target / "tokenizer.json").exists()


def test_it_draws_the_conversions_progress_as_a_bar():
    from inference.model import progress_bar

    assert progress_bar(0, 4, width=8) == "[--------] 0/4"
    assert progress_bar(1, 4, width=8) == "[##------] 1/4"
    assert progress_bar(4, 4, width=8) == "[########] 4/4"
