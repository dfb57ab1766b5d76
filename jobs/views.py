"""The staff-token API: submit a job, read its progress, stream its results as JSONL.

Bearer tokens with the `jobs.submit` scope only (no session cookies, hence no CSRF),
and only staff may hold that scope and submit. Another user's job reads as missing.
"""

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from apitokens.auth import bearer_token, user_for_token
from apitokens.models import Scope
from frontend.protocol import Refusal, parse_json
from jobs import selectors, services
from jobs.exports import jsonl_lines
from jobs.ingest import UploadRejected, documents_from_files, documents_from_records
from jobs.models import Job


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "detail": detail}}, status=status)


def _token_user(request: HttpRequest):
    raw = bearer_token(request)
    return user_for_token(raw, Scope.JOBS_SUBMIT) if raw else None


def _int_or_none(value) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UploadRejected("max_summary_tokens must be an integer.") from None


@csrf_exempt
@require_POST
def job_create(request: HttpRequest) -> HttpResponse:
    """POST /api/jobs/: multipart `files` (one or many) or JSON {"documents": [{"id", "text"}]}."""
    user = _token_user(request)
    if user is None:
        return _error(401, "unauthorized", "Send an API token with the jobs.submit scope as a Bearer token.")
    if not user.is_staff:
        return _error(403, "forbidden", "Only staff can submit jobs.")
    # Refuse an oversized body before any of it is parsed.
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > settings.BULK_MAX_UPLOAD_BYTES:
        return _error(413, "too_large", f"The upload is larger than {settings.BULK_MAX_UPLOAD_BYTES} bytes.")
    try:
        if request.content_type == "application/json":
            try:
                body = parse_json(request.body)
            except Refusal as refusal:
                raise UploadRejected(f"The body is not JSON ({refusal.detail}).") from None
            if not isinstance(body, dict):
                raise UploadRejected("The body must be a JSON object.")
            documents = documents_from_records(body.get("documents"))
            fields = body
        else:
            documents = documents_from_files(request.FILES.getlist("files") + request.FILES.getlist("file"))
            fields = request.POST
        job = services.job_create(
            owner=user,
            documents=documents,
            name=str(fields.get("name") or ""),
            preset=str(fields.get("preset") or Job.Preset.PARAGRAPH),
            instruction=str(fields.get("instruction") or ""),
            max_summary_tokens=_int_or_none(fields.get("max_summary_tokens")),
        )
    except (UploadRejected, services.InvalidJob) as exc:
        return _error(400, "invalid", str(exc))
    except PermissionDenied as exc:
        return _error(403, "forbidden", str(exc))
    return JsonResponse(selectors.job_as_dict(job), status=201)


def _visible_job(request: HttpRequest, job_id: int) -> Job | HttpResponse:
    user = _token_user(request)
    if user is None:
        return _error(401, "unauthorized", "Send an API token with the jobs.submit scope as a Bearer token.")
    job = selectors.job_visible_to(user=user, job_id=job_id) if user.is_staff else None
    return job if job is not None else _error(404, "not_found", "No such job.")


@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    return JsonResponse(selectors.job_as_dict(job)) if isinstance(job, Job) else job


@require_GET
def job_results(request: HttpRequest, job_id: int) -> HttpResponse:
    """One JSON line per finished document, in the OpenAI batch output shape."""
    job = _visible_job(request, job_id)
    if not isinstance(job, Job):
        return job
    return StreamingHttpResponse(jsonl_lines(job=job), content_type="application/x-ndjson")
