"""Reading a batch's input file in the bulk worker, a line at a time: a malformed file (a line that
is not JSON, no custom_id, a repeated one, another method or endpoint, too many lines) fails the
batch in `validating` with OpenAI's `errors` list; a line whose body the endpoint refuses becomes a
failed document with the refusal's code, and goes to the error file. The documents are written in
slices, in the one transaction that starts the job, so a batch starts whole or not at all."""

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from batches.lines import line_allowed, line_request
from batches.models import Batch
from httpkit.errors import Refusal
from inference.access import models_for
from jobs.models import Document

# A file's problems listed at most (the first ones), and documents written at once.
MAX_ERRORS = 100
SLICE = 500


class Malformed(Exception):
    """The input file cannot run; `errors` are OpenAI's error objects, with the line."""

    def __init__(self, errors: list[dict]) -> None:
        super().__init__(f"{len(errors)} problems")
        self.errors = errors


def _problem(code: str, message: str, line: int | None = None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def _line(raw: bytes, number: int, batch: Batch, seen: set[str]) -> tuple[dict | None, dict | None]:
    """The line's object, or the file's problem with it."""
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, _problem("invalid_json_line", "This line is not valid JSON.", number)
    if not isinstance(line, dict):
        return None, _problem("invalid_json_line", "This line is not a JSON object.", number)
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return None, _problem(
            "missing_custom_id", "'custom_id' must be a non-empty string.", number, "custom_id"
        )
    if len(custom_id) > 500:
        return None, _problem("invalid_custom_id", "'custom_id' is longer than 500 characters.", number)
    if custom_id in seen:
        return None, _problem("duplicate_custom_id", f"'custom_id' {custom_id!r} is repeated.", number)
    seen.add(custom_id)
    if line.get("method") != "POST":
        return None, _problem("invalid_method", "'method' must be POST.", number, "method")
    if line.get("url") != batch.endpoint:
        message = f"'url' must be the batch's endpoint, {batch.endpoint}."
        return None, _problem("mismatched_endpoint", message, number, "url")
    return line, None


def documents_from_file(batch: Batch, owner: AbstractBaseUser, stream) -> int:
    """Write the job's documents from the input file's lines; Malformed when the file is."""
    errors: list[dict] = []
    seen: set[str] = set()
    pending: list[Document] = []
    models = models_for(user=owner)
    count = 0
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        count += 1
        if count > settings.BATCH_MAX_REQUESTS:
            message = f"A batch holds at most {settings.BATCH_MAX_REQUESTS} requests."
            errors.append(_problem("too_many_requests", message, number))
            break
        line, problem = _line(raw, number, batch, seen)
        if problem is not None:
            errors.append(problem)
            if len(errors) >= MAX_ERRORS:
                break
            continue
        if errors:
            continue  # the file fails: nothing more is written
        document = Document(job=batch.job, external_id=line["custom_id"], text=orjson.dumps(line).decode())
        try:
            request = line_request(line["url"], line.get("body"))
            line_allowed(line["url"], request, models=models)
        except Refusal as refusal:
            document.status, document.finished_at = Document.Status.FAILED, timezone.now()
            document.error, document.error_code = refusal.detail, refusal.code
        pending.append(document)
        if len(pending) >= SLICE:
            Document.objects.bulk_create(pending)
            pending = []
    if not count and not errors:
        errors.append(_problem("empty_file", "The input file holds no requests."))
    if errors:
        raise Malformed(errors)
    Document.objects.bulk_create(pending)
    return count
