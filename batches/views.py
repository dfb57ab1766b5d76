"""HTTP for the Batch API: `/v1/files` (multipart upload, list, retrieve, content, delete) and
`/v1/batches` (create, list, retrieve, cancel), by a key with the `batch` scope whose user holds the
permission staff grant per group (apitokens.BATCH_PERMISSION). Another user's ids read as missing.
Errors are OpenAI's shape (openai_api.http)."""

import asyncio
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header

from apitokens.models import BATCH_PERMISSION, Scope
from batches import files, protocol, selectors, services
from batches.models import Batch, File
from httpkit.errors import Refusal, not_found
from httpkit.json import read_json
from openai_api.http import api_user, method, openai_errors, query
from openai_api.protocol import page

CHUNK = 256 * 1024
# Room in a multipart body for its boundaries and fields, past the file's own bytes.
FORM_OVERHEAD = 64 * 1024


async def _user(request: HttpRequest) -> AbstractBaseUser:
    user = await api_user(request, Scope.BATCH)
    if not await sync_to_async(user.has_perm)(BATCH_PERMISSION):
        raise Refusal("forbidden", "Batches are for the groups staff grant them to.")
    return user


def _methods(request: HttpRequest, *allowed: str) -> None:
    if request.method not in allowed:
        raise Refusal("method_not_allowed", f"use {' or '.join(allowed)}")


def _file_create(request: HttpRequest, user: AbstractBaseUser) -> dict:
    if int(request.META.get("CONTENT_LENGTH") or 0) > settings.BATCH_FILE_MAX_BYTES + FORM_OVERHEAD:
        raise Refusal("too_large", f"A file may hold at most {settings.BATCH_FILE_MAX_BYTES} bytes.")
    # Parsing spools the file to a temporary file past FILE_UPLOAD_MAX_MEMORY_SIZE.
    asked = protocol.file_upload({name: request.POST[name] for name in request.POST})
    upload = request.FILES.get("file")
    if upload is None:
        raise Refusal("invalid_field", "'file' is required", param="file")
    expiry = asked.expires_after["seconds"] if asked.expires_after else None
    stored = files.file_store(
        owner=user, content=upload, filename=upload.name, purpose=asked.purpose, expires_seconds=expiry
    )
    return protocol.file_object(stored)


def _file_list(request: HttpRequest, user: AbstractBaseUser) -> dict:
    asked = query(request)
    try:
        rows, more = files.file_list(
            owner=user,
            after=asked.after,
            limit=asked.limit,
            order=asked.order,
            purpose=request.GET.get("purpose"),
        )
    except LookupError:
        raise Refusal("invalid_field", f"'after' is no file of yours: {asked.after}", param="after") from None
    return _page([protocol.file_object(f) for f in rows], more)


def _page(data: list[dict], more: bool) -> dict:
    return page(data, has_more=more)


@openai_errors
async def file_collection(request: HttpRequest) -> JsonResponse:
    """`POST /v1/files` (multipart: file, purpose, expires_after) and `GET /v1/files`."""
    _methods(request, "GET", "POST")
    user = await _user(request)
    view = _file_create if request.method == "POST" else _file_list
    return JsonResponse(await sync_to_async(view)(request, user))


def _owned_file(user: AbstractBaseUser, file_id: str):
    found = files.file_get(owner=user, file_id=file_id)
    if found is None:
        raise not_found("file")
    return found


def _file_detail(request: HttpRequest, user: AbstractBaseUser, file_id: str) -> dict:
    found = _owned_file(user, file_id)
    if request.method == "DELETE":
        files.file_delete(file=found)
        return {"id": file_id, "object": "file", "deleted": True}
    return protocol.file_object(found)


@openai_errors
async def file_detail(request: HttpRequest, file_id: str) -> JsonResponse:
    """`GET` and `DELETE /v1/files/{id}`."""
    _methods(request, "GET", "DELETE")
    user = await _user(request)
    return JsonResponse(await sync_to_async(_file_detail)(request, user, file_id))


async def _chunks(found: File) -> AsyncIterator[bytes]:
    # An async iterator: Django's ASGI handler reads a synchronous one (a FileResponse's) whole first.
    stream = await asyncio.to_thread(found.content.open, "rb")
    try:
        while chunk := await asyncio.to_thread(stream.read, CHUNK):
            yield chunk
    finally:
        stream.close()


@openai_errors
async def file_content(request: HttpRequest, file_id: str) -> StreamingHttpResponse:
    """`GET /v1/files/{id}/content`: the bytes, streamed from disk a chunk at a time."""
    method(request, "GET")
    user = await _user(request)
    found = await sync_to_async(_owned_file)(user, file_id)
    response = StreamingHttpResponse(_chunks(found), content_type="application/jsonl")
    response["Content-Length"] = str(found.bytes)
    response["Content-Disposition"] = content_disposition_header(True, found.filename)
    return response


def _batch_object(batch: Batch) -> dict:
    return protocol.batch_object(
        batch, counts=selectors.batch_counts(batch), usage=selectors.batch_usage(batch)
    )


def _batch_create(request: HttpRequest, user: AbstractBaseUser) -> dict:
    asked = protocol.batch_create(read_json(request, max_bytes=settings.API_MAX_REQUEST_BYTES))
    batch = services.batch_create(
        owner=user,
        input_file_id=asked.input_file_id,
        endpoint=asked.endpoint,
        completion_window=asked.completion_window,
        metadata=asked.metadata,
    )
    return _batch_object(selectors.batch_get(owner=user, batch_id=batch.batch_id))


def _batch_list(request: HttpRequest, user: AbstractBaseUser) -> dict:
    asked = query(request)
    try:
        rows, more = selectors.batch_list(owner=user, after=asked.after, limit=asked.limit)
    except LookupError:
        raise Refusal(
            "invalid_field", f"'after' is no batch of yours: {asked.after}", param="after"
        ) from None
    return _page([_batch_object(b) for b in rows], more)


@openai_errors
async def batch_collection(request: HttpRequest) -> JsonResponse:
    """`POST /v1/batches` and `GET /v1/batches` (newest first)."""
    _methods(request, "GET", "POST")
    user = await _user(request)
    view = _batch_create if request.method == "POST" else _batch_list
    return JsonResponse(await sync_to_async(view)(request, user))


def _batch_detail(request: HttpRequest, user: AbstractBaseUser, batch_id: str, cancel: bool) -> dict:
    batch = selectors.batch_get(owner=user, batch_id=batch_id)
    if batch is None:
        raise not_found("batch")
    if cancel:
        services.batch_cancel(batch=batch)
        batch = selectors.batch_get(owner=user, batch_id=batch_id)
    return _batch_object(batch)


@openai_errors
async def batch_detail(request: HttpRequest, batch_id: str) -> JsonResponse:
    """`GET /v1/batches/{id}`."""
    method(request, "GET")
    user = await _user(request)
    return JsonResponse(await sync_to_async(_batch_detail)(request, user, batch_id, False))


@openai_errors
async def batch_cancel(request: HttpRequest, batch_id: str) -> JsonResponse:
    """`POST /v1/batches/{id}/cancel`: `cancelling`, then `cancelled` once its runner has stopped."""
    method(request, "POST")
    user = await _user(request)
    return JsonResponse(await sync_to_async(_batch_detail)(request, user, batch_id, True))
