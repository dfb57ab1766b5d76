"""Management commands that `make run` relies on."""

import stat
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from enginehost.model import is_prepared
from harness.processes import free_port


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


@pytest.mark.django_db
def test_it_keeps_the_random_passwords_where_make_run_asks_readable_by_their_owner_only(settings, tmp_path):
    settings.DEBUG = False
    settings.DEMO_PASSWORD = settings.STAFF_PASSWORD = ""  # as unset with DEBUG off
    kept = tmp_path / "data" / "initial-passwords"
    out = StringIO()
    call_command("bootstrap_users", keep_passwords=kept, stdout=out)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    for username in (settings.DEMO_USERNAME, settings.STAFF_USERNAME):
        shown = out.getvalue().split(f" {username} / ")[1].split()[0]
        assert get_user_model().objects.get(username=username).check_password(shown)
        assert f"\n{username} {shown}\n" in kept.read_text()
        assert f"{username} / {shown}  (created; kept in {kept})" in out.getvalue()
    # The next start changes nothing and says where the first passwords are.
    before = kept.read_text()
    again = StringIO()
    call_command("bootstrap_users", keep_passwords=kept, stdout=again)
    assert kept.read_text() == before
    assert f"(exists; password unchanged; the one it was created with is in {kept})" in again.getvalue()


@pytest.mark.django_db
def test_it_keeps_no_password_the_operator_chose(settings, tmp_path):
    kept = tmp_path / "initial-passwords"
    kept.write_text(f"{settings.DEMO_USERNAME} left-from-an-earlier-account\n")
    call_command("bootstrap_users", keep_passwords=kept, stdout=StringIO())  # development passwords
    assert "left-from-an-earlier-account" not in kept.read_text()
    assert (
        get_user_model().objects.get(username=settings.DEMO_USERNAME).check_password(settings.DEMO_PASSWORD)
    )


@pytest.fixture
def redis_not_running_yet(settings):
    """Redis at a port nothing listens on: `make run` makes its users before it starts Redis."""
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"


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
    from enginehost.model import progress_bar

    assert progress_bar(0, 4, width=8) == "[--------] 0/4"
    assert progress_bar(1, 4, width=8) == "[##------] 1/4"
    assert progress_bar(4, 4, width=8) == "[########] 4/4"
