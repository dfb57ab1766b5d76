"""`manage.py summarize FILE... [--wait]`: submit a job from the terminal, optionally watch it."""

import argparse
import json
import time
from contextlib import ExitStack
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.files import File
from django.core.management.base import BaseCommand, CommandError

from documents.uploads import UploadRejected, documents_from_files
from jobs import selectors, services
from jobs.models import Job

BAR_WIDTH = 30


def progress_line(p: selectors.Progress) -> str:
    finished = p.done + p.failed + p.cancelled
    filled = round(BAR_WIDTH * finished / p.total) if p.total else 0
    rate = f"{p.docs_per_minute} docs/min" if p.docs_per_minute is not None else "waiting for a worker"
    eta = f", about {round(p.eta_seconds)} s left" if p.eta_seconds is not None else ""
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    return f"[{bar}] {p.done} done, {p.failed} failed of {p.total} · {rate}{eta}"


class Command(BaseCommand):
    help = "Summarize files as a bulk job (.txt .md .html .pdf .zip .jsonl .csv); --wait shows progress."

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", type=Path)
        parser.add_argument("--user", default=settings.STAFF_USERNAME, help="staff user who owns the job")
        parser.add_argument("--name", default="")
        parser.add_argument("--preset", choices=Job.Preset.values, default=Job.Preset.PARAGRAPH)
        parser.add_argument("--instruction", default="", help="with --preset custom")
        parser.add_argument("--max-tokens", type=int, default=None, help="maximum summary length in tokens")
        parser.add_argument("--wait", action="store_true", help="show progress until the job ends")
        parser.add_argument("--output", type=Path, help="with --wait: write the results here as JSONL")
        parser.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)

    def handle(
        self, *args, files, user, name, preset, instruction, max_tokens, wait, output, interval, **options
    ):
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"no user {user!r}")
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise CommandError(f"not a file: {', '.join(missing)}")
        try:
            # The files stay open while the job is stored: their documents are read as stored.
            with ExitStack() as stack:
                uploads = [File(stack.enter_context(open(f, "rb")), name=f.name) for f in files]
                job = services.job_create(
                    owner=owner,
                    documents=documents_from_files(uploads),
                    name=name or ", ".join(f.name for f in files)[:200],
                    preset=preset,
                    instruction=instruction,
                    max_summary_tokens=max_tokens,
                )
        except (UploadRejected, services.InvalidJob, PermissionDenied) as exc:
            raise CommandError(str(exc)) from exc
        total, _ = selectors.job_document_counts(job=job)
        self.stdout.write(f"Job {job.pk}: {total} documents queued.")
        for external_id, error in selectors.job_refused_documents(job=job):
            self.stderr.write(f"  {external_id}: {error}")
        if not wait:
            return
        job = self._watch(job, interval)
        if output is not None:
            with open(output, "w", encoding="utf-8") as out:
                for line in selectors.job_result_lines(job=job):
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self.stdout.write(f"Results written to {output}.")
        if job.status == Job.Status.FAILED:
            raise CommandError(f"Job {job.pk} failed: no document was summarized.")

    def _watch(self, job: Job, interval: float) -> Job:
        tty = self.stdout.isatty()
        last = ""
        while True:
            job.refresh_from_db()
            line = progress_line(selectors.job_progress(job=job))
            if tty:
                self.stdout.write("\r" + line.ljust(len(last)), ending="")
            elif line != last:
                self.stdout.write(line)
            last = line
            if job.status not in (*Job.ACTIVE, Job.Status.DRAFT):
                break
            time.sleep(interval)
        if tty:
            self.stdout.write("")
        self.stdout.write(f"Job {job.pk} {job.status}.")
        return job
