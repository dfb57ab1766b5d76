"""`manage.py summarize FILE... [--wait]`."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from jobs.management.commands.summarize import progress_line
from jobs.models import Job
from jobs.selectors import Progress
from tests.support.jobs_helpers import staff_user

pytestmark = pytest.mark.django_db


def test_it_submits_files_as_a_job(tmp_path):
    staff_user("admin")
    (tmp_path / "a.txt").write_text("First.")
    (tmp_path / "b.csv").write_text("id,text\nr1,Row one\nr2,\n")
    out, err = StringIO(), StringIO()
    call_command(
        "summarize",
        str(tmp_path / "a.txt"),
        str(tmp_path / "b.csv"),
        "--user",
        "admin",
        stdout=out,
        stderr=err,
    )
    job = Job.objects.get()
    assert f"Job {job.pk}: 3 documents queued." in out.getvalue()
    assert "r2: The file is empty." in err.getvalue()
    assert job.status == Job.Status.QUEUED and job.name == "a.txt, b.csv"


def test_it_refuses_missing_files_non_staff_and_bad_uploads(tmp_path):
    staff_user("admin")
    with pytest.raises(CommandError, match="not a file"):
        call_command("summarize", str(tmp_path / "missing.txt"), "--user", "admin")
    (tmp_path / "x.exe").write_bytes(b"MZ")
    with pytest.raises(CommandError, match="unsupported file type"):
        call_command("summarize", str(tmp_path / "x.exe"), "--user", "admin")
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("plain")
    (tmp_path / "a.txt").write_text("Fine.")
    with pytest.raises(CommandError, match="Only staff"):
        call_command("summarize", str(tmp_path / "a.txt"), "--user", "plain")


def test_it_waits_for_the_end_and_writes_results(tmp_path):
    staff_user("admin")
    (tmp_path / "empty.txt").write_text("")
    out = StringIO()
    with pytest.raises(CommandError, match="failed"):
        call_command(
            "summarize", str(tmp_path / "empty.txt"), "--user", "admin", "--wait",
            "--output", str(tmp_path / "out.jsonl"), stdout=out, stderr=StringIO(),
        )  # fmt: skip
    assert "0 done, 1 failed of 1" in out.getvalue()
    assert '"custom_id": "empty.txt"' in (tmp_path / "out.jsonl").read_text()


def test_it_draws_a_progress_bar():
    p = Progress(
        job=1, status="running", total=20, done=9, failed=1, cancelled=0, running=4, pending=6, percent=50.0,
        docs_per_minute=12.5, eta_seconds=48.0, prompt_tokens=0, cached_tokens=0, completion_tokens=0,
        cache_hit_ratio=None,
    )  # fmt: skip
    assert (
        progress_line(p)
        == "[###############...............] 9 done, 1 failed of 20 · 12.5 docs/min, about 48 s left"
    )
