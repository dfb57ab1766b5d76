"""Management commands that `make run` relies on."""

from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

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
