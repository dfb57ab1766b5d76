"""Jobs in the admin: submit, watch live progress, start / cancel / retry, download results.

Every action calls a service. Live progress is a static script polling a small JSON
view; document and model text is only ever rendered through autoescaping templates
and format_html, never marked safe.

Why one module of about 260 lines: Django finds a model's admin, its actions and its extra
views in one ModelAdmin; the views are small and each calls a service.
"""

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from jobs import selectors, services
from jobs.exports import csv_lines, jsonl_lines
from jobs.forms import JobCreateForm
from jobs.ingest import UploadRejected
from jobs.models import Document, Job


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"


class DocumentInline(admin.TabularInline):
    model = Document
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False
    fields = ["external_id", "status", "attempts", "summary", "tokens", "error"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("result").defer("source", "text")

    @admin.display(description="summary")
    def summary(self, document: Document) -> str:
        result = getattr(document, "result", None)
        return result.summary if result else ""

    @admin.display(description="tokens (document / prompt / cached / summary)")
    def tokens(self, document: Document) -> str:
        result = getattr(document, "result", None)
        if result is None:
            return ""
        chunks = f" in {result.chunks} chunks" if result.chunks > 1 else ""
        return (
            f"{result.document_tokens} / {result.prompt_tokens} / {result.cached_tokens} / "
            f"{result.completion_tokens}{chunks}"
        )


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "owner", "status", "progress", "created_at"]
    list_filter = ["status", "preset", "created_at"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner"]
    actions = ["start_jobs", "cancel_jobs", "retry_failed"]
    inlines = [DocumentInline]
    fields = [
        "name",
        "owner",
        "status",
        "progress",
        "cache",
        "downloads",
        "preset",
        "instruction",
        "max_summary_tokens",
        "created_at",
        "started_at",
        "finished_at",
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

    @admin.display(description="job", ordering="name")
    def title(self, job: Job) -> str:
        return str(job)

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

    @admin.display(description="prompt cache")
    def cache(self, job: Job) -> str:
        p = self._progress(job)
        if p.cache_hit_ratio is None:
            return "–"
        return f"{p.cache_hit_ratio:.1%} of {p.prompt_tokens} prompt tokens served from the prefix cache"

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
        extra_context = {**(extra_context or {}), "job_actions": ["start", "cancel", "retry"]}
        return super().change_view(request, object_id, form_url, extra_context)

    def progress_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        ids = [int(i) for i in request.GET.get("ids", "").split(",") if i.isdigit()][:200]
        progress = selectors.jobs_progress(jobs=Job.objects.filter(pk__in=ids))
        return JsonResponse({"jobs": {str(pk): p.as_dict() for pk, p in progress.items()}})

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
        if action not in ("start", "cancel", "retry") or not self.has_change_permission(request):
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
