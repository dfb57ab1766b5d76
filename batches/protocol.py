"""The Batch API's requests and objects as OpenAI's API shapes them: a file upload's fields, a batch's
body, the file and batch objects, and the lines of a batch's output and error files."""

from typing import Annotated, Any

from pydantic import Field, StrictStr, field_validator

from batches.lines import ENDPOINTS
from batches.models import Batch, File
from httpkit.errors import ERRORS, Refusal
from httpkit.validation import Input, checked, null_is, refuse
from openai_api.protocol import Metadata, error_body

# OpenAI's bounds on a file's `expires_after.seconds`: an hour to 30 days.
EXPIRY_SECONDS = (3600, 30 * 24 * 3600)


class FileUpload(Input):
    """A `POST /v1/files` form's fields (the file itself is checked by batches.files)."""

    names_param = True
    purpose: Annotated[
        str,
        Field(
            pattern="^batch$",
            description="'purpose' must be batch: this server keeps files for the Batch API only",
        ),
    ] = Field(None, validate_default=True)
    expires_after: dict[str, Any] | None = Field(
        None, description="'expires_after' must be an object with anchor and seconds"
    )

    @field_validator("expires_after")
    @classmethod
    def _expiry(cls, value: dict | None) -> dict | None:
        if value is None:
            return None
        low, high = EXPIRY_SECONDS
        seconds = value.get("seconds")
        if value.get("anchor") != "created_at":
            raise refuse("invalid_field", "'expires_after.anchor' must be created_at")
        if not (isinstance(seconds, int) or (isinstance(seconds, str) and seconds.isdigit())) or not (
            low <= int(seconds) <= high
        ):
            raise refuse("invalid_field", f"'expires_after.seconds' must be an integer from {low} to {high}")
        return {"anchor": "created_at", "seconds": int(seconds)}


def file_upload(form: dict[str, str]) -> FileUpload:
    """Check a multipart form's fields; `expires_after[anchor]` and `[seconds]` form one object."""
    data: dict[str, Any] = {}
    for name, value in form.items():
        if name.startswith("expires_after[") and name.endswith("]"):
            data.setdefault("expires_after", {})[name[len("expires_after[") : -1]] = value
        else:
            data[name] = value
    return checked(FileUpload, data)


class BatchCreate(Input):
    """A `POST /v1/batches` body."""

    names_param = True
    input_file_id: Annotated[StrictStr, Field(min_length=1)] = Field(
        None, validate_default=True, description="'input_file_id' must be the id of a file of purpose batch"
    )
    endpoint: Annotated[
        str,
        Field(
            pattern=f"^({'|'.join(ENDPOINTS)})$",
            description=f"'endpoint' must be one of {', '.join(ENDPOINTS)}",
        ),
    ] = Field(None, validate_default=True)
    completion_window: Annotated[
        str, Field(pattern="^24h$", description="'completion_window' must be 24h")
    ] = Field(None, validate_default=True)
    metadata: Annotated[Metadata, null_is(dict)] = Field(default_factory=dict)


def batch_create(data: object) -> BatchCreate:
    return checked(BatchCreate, data)


def _seconds(moment) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def file_object(file: File) -> dict:
    return {
        "id": file.file_id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": _seconds(file.created_at),
        "expires_at": _seconds(file.expires_at),
        "filename": file.filename,
        "purpose": file.purpose,
        "status": "processed",
        "status_details": None,
    }


def batch_object(batch: Batch, *, counts: dict, usage: dict) -> dict:
    """The batch object: `counts` total, completed and failed; `usage` the tokens of what ran."""
    ids = {
        "input_file_id": batch.input_file.file_id if batch.input_file else None,
        "output_file_id": batch.output_file.file_id if batch.output_file else None,
        "error_file_id": batch.error_file.file_id if batch.error_file else None,
    }
    moments = (
        "created_at in_progress_at expires_at finalizing_at completed_at failed_at expired_at "
        "cancelling_at cancelled_at"
    ).split()
    prompt, cached, answer = usage["prompt_tokens"], usage["cached_tokens"], usage["completion_tokens"]
    return {
        "id": batch.batch_id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
        "completion_window": batch.completion_window,
        "status": batch.status,
        **ids,
        **{name: _seconds(getattr(batch, name)) for name in moments},
        "request_counts": counts,
        "metadata": batch.metadata,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": answer,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + answer,
        },
    }


def output_line(*, line_id: str, custom_id: str, body: dict) -> dict:
    response = {"status_code": 200, "request_id": line_id, "body": body}
    return {"id": line_id, "custom_id": custom_id, "response": response, "error": None}


def error_line(*, line_id: str, custom_id: str, code: str, message: str) -> dict:
    """A line that did not run, or failed: a code of the error table carries its status and OpenAI's
    error body as the synchronous API answers it; the batch's own codes (`batch_cancelled`,
    `batch_expired`) have no response."""
    response = None
    if code in ERRORS:
        refusal = Refusal(code, message)
        response = {"status_code": refusal.status, "request_id": line_id, "body": error_body(refusal)}
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": response,
        "error": {"code": code, "message": message},
    }
