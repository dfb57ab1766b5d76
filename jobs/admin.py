"""Jobs in the admin: submit, watch a job live, start / cancel / retry, download results.

Every action calls a service. What changes while a job runs (its status, progress, times and
prompt cache, each document's state, which actions apply) is drawn by the same functions for
the page and for the JSON a static script polls (progress.json), and that script puts the new
text in place. Document and model text is only ever rendered through autoescaping templates and
format_html, never marked safe, and set with textContent in the browser.

A job is not edited: its page has no Save buttons, and a form posted to it is refused."""

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import display_for_field
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from documents.uploads import UploadRejected
from jobs import selectors, services
from jobs.exports import csv_lines, jsonl_lines
from jobs.forms import JobCreateForm
from jobs.models import Document, Job

ACTIONS = {"start": "Start", "cancel": "Cancel", "retry": "Retry failed"}
EMPTY = "–"


def _live(kind: str, pk: int, field: str, text: str) -> str:
    """A value the page's script keeps current: `[data-job|data-document="pk"][data-field]`."""
    return format_html('<span data-{}="{}" data-field="{}">{}</span>', kind, pk, field, text)


def _shown(instance, name: str) -> str:
    """A model field's value as the admin shows it (choice labels, local times, EMPTY)."""
    return str(display_for_field(getattr(instance, name), instance._meta.get_field(name), EMPTY))


def job_actions(progress: selectors.Progress) -> dict[str, bool]:
    """Which of the page's actions would change something now, by the services' conditions; retry
    counts every failed document, though one refused at upload stays failed when retried."""
    return {
        "start": progress.status in (Job.Status.DRAFT, Job.Status.CANCELLED),
        "cancel": progress.status in (*Job.ACTIVE, Job.Status.DRAFT),
        "retry": progress.failed > 0,
    }


def job_fields(job: Job, progress: selectors.Progress) -> dict[str, str]:
    """The job's live fields as text."""
    if progress.cache_hit_ratio is None:
        cache = EMPTY
    else:
        cache = (
            f"{progress.cache_hit_ratio:.1%} of {progress.prompt_tokens} prompt tokens "
            "served from the prefix cache"
        )
    return {
        "status": _shown(job, "status"),
        "started_at": _shown(job, "started_at"),
        "finished_at": _shown(job, "finished_at"),
        "cache": cache,
    }


def document_fields(document: Document) -> dict[str, str]:
    """A document's live fields as text."""
    result = getattr(document, "result", None)
    tokens = ""
    if result is not None:
        chunks = f" in {result.chunks} chunks" if result.chunks > 1 else ""
        tokens = (
            f"{result.document_tokens} / {result.prompt_tokens} / {result.cached_tokens} / "
            f"{result.completion_tokens}{chunks}"
        )
    return {
        "status": _shown(document, "status"),
        "attempts": str(document.attempts),
        "summary": result.summary if result else "",
        "tokens": tokens,
        "error": document.error,
    }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"


def _cell(kind: str, field: str, description: str, ordering: str | None = None):
    """A read-only admin column: one of the live fields that the admin's `_fields` gives."""

    @admin.display(description=description, ordering=ordering)
    def cell(self, instance) -> str:
        return _live(kind, instance.pk, field, self._fields(instance)[field])

    return cell


class DocumentInline(admin.TabularInline):
    """The job's documents, read only: each cell is one of `document_fields`, kept current."""

    model = Document
    extra = 0
    show_change_link = False
    fields = ["external_id", "state", "tries", "summary", "tokens", "error_text"]
    readonly_fields = fields

    state = _cell("document", "status", "status")
    tries = _cell("document", "attempts", "attempts")
    summary = _cell("document", "summary", "summary")
    tokens = _cell("document", "tokens", "tokens (document / prompt / cached / summary)")
    error_text = _cell("document", "error", "error")

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("result").defer("source", "text")

    def _fields(self, document: Document) -> dict[str, str]:
        return document_fields(document)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "kind", "owner", "state", "progress", "created_at"]
    list_filter = ["status", "kind", "preset", "created_at"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner"]
    actions = ["start_jobs", "cancel_jobs", "retry_failed"]
    inlines = [DocumentInline]
    fields = [
        "name",
        "kind",
        "owner",
        "state",
        "progress",
        "cache",
        "downloads",
        "preset",
        "instruction",
        "max_summary_tokens",
        "created_at",
        "started",
        "finished",
    ]
    readonly_fields = fields

    class Media:
        js = ["jobs/admin_progress.js"]
        css = {"all": ["jobs/admin_progress.css"]}

    def get_urls(self):
        own = [
            path("progress.json", self.admin_site.admin_view(self.progress_view), name="jobs_job_progress"),
            path(
                "<int:job_id>/results.jsonl",
                self.admin_site.admin_view(self.jsonl_view),
                name="jobs_job_jsonl",
            ),
            path("<int:job_id>/results.csv", self.admin_site.admin_view(self.csv_view), name="jobs_job_csv"),
            path(
                "<int:job_id>/do/<str:action>/",
                self.admin_site.admin_view(self.action_view),
                name="jobs_job_do",
            ),
        ]
        return own + super().get_urls()

    def _progress(self, job: Job) -> selectors.Progress:
        if not hasattr(job, "_progress_cache"):
            job._progress_cache = selectors.job_progress(job=job)
        return job._progress_cache

    def _fields(self, job: Job) -> dict[str, str]:
        if not hasattr(job, "_fields_cache"):
            job._fields_cache = job_fields(job, self._progress(job))
        return job._fields_cache

    @admin.display(description="job", ordering="name")
    def title(self, job: Job) -> str:
        return str(job)

    state = _cell("job", "status", "status", ordering="status")
    started = _cell("job", "started_at", "started at")
    finished = _cell("job", "finished_at", "finished at")
    cache = _cell("job", "cache", "prompt cache")

    @admin.display(description="progress")
    def progress(self, job: Job) -> str:
        p = self._progress(job)
        return format_html(
            '<span class="job-progress" data-job-progress="{}" data-progress-url="{}">'
            '<progress max="{}" value="{}"></progress> '
            '<span data-field="counts">{} done, {} failed of {}</span> · '
            '<span data-field="rate">{}</span> · <span data-field="eta">{}</span></span>',
            job.pk,
            reverse("admin:jobs_job_progress"),
            max(p.total, 1),
            p.done + p.failed + p.cancelled,
            p.done,
            p.failed,
            p.total,
            f"{p.docs_per_minute} docs/min" if p.docs_per_minute is not None else "not started",
            f"{_duration(p.eta_seconds)} left" if p.eta_seconds is not None else p.status,
        )

    @admin.display(description="results")
    def downloads(self, job: Job) -> str:
        return format_html(
            '<a href="{}">JSONL</a> · <a href="{}">CSV</a>',
            reverse("admin:jobs_job_jsonl", args=[job.pk]),
            reverse("admin:jobs_job_csv", args=[job.pk]),
        )

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        if (
            request.method == "POST"
            and int(request.META.get("CONTENT_LENGTH") or 0) > settings.BULK_MAX_UPLOAD_BYTES
        ):
            form = JobCreateForm()
            form.add_error(None, f"The upload is larger than {settings.BULK_MAX_UPLOAD_BYTES} bytes.")
        elif request.method == "POST":
            form = JobCreateForm(request.POST, request.FILES)
            if form.is_valid():
                try:
                    job = services.job_create(
                        owner=request.user,
                        documents=form.documents,
                        name=form.cleaned_data["name"],
                        preset=form.cleaned_data["preset"],
                        instruction=form.cleaned_data["instruction"],
                        max_summary_tokens=form.cleaned_data["max_summary_tokens"],
                        start=form.cleaned_data["start"],
                    )
                except (services.InvalidJob, UploadRejected) as exc:
                    form.add_error(None, str(exc))
                else:
                    self.log_addition(request, job, [{"added": {}}])
                    total, failed = selectors.job_document_counts(job=job)
                    note = f" {failed} of them could not be read; see their errors." if failed else ""
                    self.message_user(request, f"Job {job.pk} created with {total} documents.{note}")
                    return redirect("admin:jobs_job_change", job.pk)
        else:
            form = JobCreateForm()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Summarize documents",
            "form": form,
            "media": self.media + form.media,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/jobs/job/add_form.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Nothing on a job's page is edited: a posted form would only log "no fields changed".
        if request.method == "POST":
            if not self.has_change_permission(request):
                raise PermissionDenied
            return HttpResponseNotAllowed(["GET"])
        return super().change_view(request, object_id, form_url, extra_context)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context.update(show_save=False, show_save_and_continue=False, show_save_and_add_another=False)
        context["title"] = f"View {self.opts.verbose_name}"
        if obj is not None:
            enabled = job_actions(self._progress(obj))
            context["job_actions"] = [(action, label, enabled[action]) for action, label in ACTIONS.items()]
        return super().render_change_form(request, context, add, change, form_url, obj)

    def progress_view(self, request: HttpRequest) -> JsonResponse:
        """Each job of `ids`: its progress, live fields and enabled actions; and with
        `documents=<id>`, that job's documents' live fields."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        ids = [int(i) for i in request.GET.get("ids", "").split(",") if i.isdigit()][:200]
        jobs = {job.pk: job for job in Job.objects.filter(pk__in=ids)}
        progress = selectors.jobs_progress(jobs=jobs.values())
        body = {
            str(pk): {**p.as_dict(), "fields": job_fields(jobs[pk], p), "actions": job_actions(p)}
            for pk, p in progress.items()
        }
        detailed = request.GET.get("documents", "")
        if detailed.isdigit() and int(detailed) in jobs:
            body[detailed]["documents"] = [
                {"id": document.pk, "fields": document_fields(document)}
                for document in selectors.job_documents(job=jobs[int(detailed)])
            ]
        return JsonResponse({"jobs": body})

    def _download(self, request: HttpRequest, job_id: int, lines, content_type: str, suffix: str):
        if not self.has_view_permission(request):
            raise PermissionDenied
        job = get_object_or_404(Job, pk=job_id)
        response = StreamingHttpResponse(lines(job=job), content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-results.{suffix}"'
        return response

    def jsonl_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        return self._download(request, job_id, jsonl_lines, "application/x-ndjson", "jsonl")

    def csv_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        return self._download(request, job_id, csv_lines, "text/csv; charset=utf-8", "csv")

    def _apply(self, request: HttpRequest, action: str, job: Job) -> str:
        """Run an action through its service and record it in the admin's log, as creation is."""
        if action == "start":
            job = services.job_start(job=job)
            outcome = f"Job {job.pk} is {job.status}."
        elif action == "cancel":
            job = services.job_cancel(job=job)
            outcome = f"Job {job.pk} is {job.status}."
        else:
            count = services.job_retry_failed(job=job)
            outcome = f"Job {job.pk}: {count} failed document(s) queued again."
        self.log_change(request, job, f"{action}: {outcome}")
        return outcome

    def action_view(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        # The permission first, so a missing job and a forbidden one answer alike.
        if action not in ACTIONS or not self.has_change_permission(request):
            raise PermissionDenied
        job = get_object_or_404(Job, pk=job_id)
        self.message_user(request, self._apply(request, action, job), messages.SUCCESS)
        return redirect("admin:jobs_job_change", job.pk)

    @admin.action(description="Start selected jobs", permissions=["change"])
    def start_jobs(self, request, queryset):
        for job in queryset:
            self.message_user(request, self._apply(request, "start", job))

    @admin.action(
        description="Cancel selected jobs (abort in-flight requests, keep finished results)",
        permissions=["change"],
    )
    def cancel_jobs(self, request, queryset):
        for job in queryset:
            self.message_user(request, self._apply(request, "cancel", job))

    @admin.action(description="Retry failed documents of selected jobs", permissions=["change"])
    def retry_failed(self, request, queryset):
        for job in queryset:
            self.message_user(request, self._apply(request, "retry", job))
