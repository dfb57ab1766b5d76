"""The staff-token API: submit a job, read its progress, stream its results as JSONL.

Bearer tokens with the `jobs.submit` scope only (no session cookies, hence no CSRF),
and only staff may hold that scope and submit. Another user's job reads as missing.
Errors are every JSON endpoint's (httpkit, docs/protocol.md).
"""

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from apitokens.auth import bearer_token, user_for_token
from apitokens.models import Scope
from documents.uploads import UploadRejected, documents_from_files, documents_from_records
from httpkit.errors import Refusal, not_found, unauthenticated
from httpkit.json import json_view, read_json
from jobs import selectors, services
from jobs.exports import jsonl_lines
from jobs.models import Job


def _token_user(request: HttpRequest):
    raw = bearer_token(request)
    user = user_for_token(raw, Scope.JOBS_SUBMIT) if raw else None
    if user is None:
        raise unauthenticated("Send an API token with the jobs.submit scope as a Bearer token.")
    return user


def _int_or_none(value) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UploadRejected("max_summary_tokens must be an integer.") from None


@csrf_exempt
@json_view("POST")
def job_create(request: HttpRequest) -> HttpResponse:
    """POST /api/jobs/: multipart `files` (one or many) or JSON {"documents": [{"id", "text"}]}."""
    user = _token_user(request)
    if not user.is_staff:
        raise Refusal("forbidden", "Only staff can submit jobs.")
    # Refuse an oversized body before any of it is parsed.
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > settings.BULK_MAX_UPLOAD_BYTES:
        raise Refusal("too_large", f"The upload is larger than {settings.BULK_MAX_UPLOAD_BYTES} bytes.")
    try:
        if request.content_type == "application/json":
            fields = read_json(request, max_bytes=settings.BULK_MAX_UPLOAD_BYTES)
            documents = documents_from_records(fields.get("documents"))
        else:
            fields = request.POST
            documents = documents_from_files(request.FILES.getlist("files") + request.FILES.getlist("file"))
        job = services.job_create(
            owner=user,
            documents=documents,
            name=str(fields.get("name") or ""),
            preset=str(fields.get("preset") or Job.Preset.PARAGRAPH),
            instruction=str(fields.get("instruction") or ""),
            max_summary_tokens=_int_or_none(fields.get("max_summary_tokens")),
        )
    except (UploadRejected, services.InvalidJob) as exc:
        raise Refusal("invalid_field", str(exc)) from None
    except PermissionDenied as exc:
        raise Refusal("forbidden", str(exc)) from None
    return JsonResponse(selectors.job_as_dict(job), status=201)


def _visible_job(request: HttpRequest, job_id: int) -> Job:
    user = _token_user(request)
    job = selectors.job_visible_to(user=user, job_id=job_id) if user.is_staff else None
    if job is None:
        raise not_found("job")
    return job


@json_view("GET")
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    return JsonResponse(selectors.job_as_dict(_visible_job(request, job_id)))


@json_view("GET")
def job_results(request: HttpRequest, job_id: int) -> HttpResponse:
    """One JSON line per finished document, in the OpenAI batch output shape."""
    job = _visible_job(request, job_id)
    return StreamingHttpResponse(jsonl_lines(job=job), content_type="application/x-ndjson")
