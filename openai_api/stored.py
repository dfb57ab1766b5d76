"""Stored completions over HTTP: `GET /v1/chat/completions` (a page of them), `GET`, `POST` (its
metadata) and `DELETE /v1/chat/completions/{id}`, and `GET .../{id}/messages`: the exchanges a key's
user made with `store: true` (conversations.exchanges). A key of a staff user with the
read_all_conversations permission that also holds `store.read` reads everyone's; each read of
another user's exchange is recorded (audit), as the admin's reads are. Changes are the owner's only."""

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, JsonResponse

from apitokens.models import Scope
from audit.models import ConversationRead
from audit.services import conversation_read_record, conversation_reads_record
from conversations import exchanges
from conversations.models import StoredCompletion
from conversations.selectors import may_read_all
from httpkit.errors import Refusal, not_found
from httpkit.json import read_json
from httpkit.validation import checked
from openai_api import protocol
from openai_api.http import api_user, key_holds, method, openai_errors, query


def _everyone(request: HttpRequest, user: AbstractBaseUser) -> bool:
    return user.is_staff and may_read_all(user) and key_holds(request, Scope.STORE_READ)


def _shape(completion: StoredCompletion) -> dict:
    answer = completion.answer
    return {
        **protocol.completion(
            id=completion.completion_id,
            created=int(completion.created_at.timestamp()),
            model=completion.model_name,
            text=answer.content,
            finish_reason=answer.finish_reason or answer.status,
            usage=protocol.usage(answer.prompt_tokens, answer.cached_tokens, answer.completion_tokens),
        ),
        "metadata": completion.metadata,
    }


def _one(request: HttpRequest, user: AbstractBaseUser, completion_id: str) -> StoredCompletion:
    """One the key may read; another user's is recorded as read, or reads as missing."""
    completion = exchanges.stored_completion_get(
        user=user, completion_id=completion_id, everyone=_everyone(request, user)
    )
    if completion is None:
        raise not_found("stored completion")
    if completion.owner_id != user.pk:
        conversation_read_record(
            reader=user,
            owner_id=completion.owner_id,
            conversation_id=completion.conversation_id,
            through=ConversationRead.Through.API,
            detail=request.path,
        )
    return completion


def _list(request: HttpRequest, user: AbstractBaseUser) -> dict:
    asked = query(request)
    everyone = _everyone(request, user)
    try:
        page = exchanges.stored_completion_list(
            user=user,
            everyone=everyone,
            model=asked.model,
            metadata=asked.metadata,
            after=asked.after,
            limit=asked.limit,
            order=asked.order,
        )
    except LookupError:
        raise Refusal("invalid_field", f"'after' is no stored completion of yours: {asked.after}") from None
    if everyone:
        conversation_reads_record(
            reader=user,
            conversations=[(c.conversation_id, c.owner_id) for c in page.completions],
            through=ConversationRead.Through.API,
            detail=request.get_full_path(),
        )
    return protocol.page([_shape(c) for c in page.completions], has_more=page.has_more)


async def completion_list(request: HttpRequest) -> JsonResponse:
    """`GET /v1/chat/completions` (openai_api.views routes the path's GET here)."""
    user = await api_user(request)
    return JsonResponse(await sync_to_async(_list)(request, user))


def _detail(request: HttpRequest, user: AbstractBaseUser, completion_id: str) -> dict:
    if request.method == "GET":
        return _shape(_one(request, user, completion_id))
    try:
        if request.method == "POST":
            body = read_json(request, max_bytes=settings.API_MAX_REQUEST_BYTES)
            metadata = checked(protocol.MetadataUpdate, body).metadata
            completion = exchanges.stored_completion_update(
                user=user, completion_id=completion_id, metadata=metadata
            )
            return _shape(completion)
        exchanges.stored_completion_delete(user=user, completion_id=completion_id)
    except LookupError:
        raise not_found("stored completion") from None
    return {"id": completion_id, "object": "chat.completion.deleted", "deleted": True}


@openai_errors
async def completion_detail(request: HttpRequest, completion_id: str) -> JsonResponse:
    """`GET`, `POST` (metadata only) and `DELETE /v1/chat/completions/{id}`."""
    if request.method not in ("GET", "POST", "DELETE"):
        raise Refusal("method_not_allowed", "use GET, POST or DELETE")
    user = await api_user(request)
    return JsonResponse(await sync_to_async(_detail)(request, user, completion_id))


def _messages(request: HttpRequest, user: AbstractBaseUser, completion_id: str) -> dict:
    asked = query(request)
    messages = exchanges.stored_completion_messages(_one(request, user, completion_id))
    if asked.order == "desc":
        messages.reverse()
    if asked.after:
        ids = [m["id"] for m in messages]
        if asked.after not in ids:
            raise Refusal("invalid_field", f"'after' is no message of this completion: {asked.after}")
        messages = messages[ids.index(asked.after) + 1 :]
    shown = [{**m, "name": None, "content_parts": None} for m in messages[: asked.limit]]
    return protocol.page(shown, has_more=len(messages) > asked.limit)


@openai_errors
async def completion_messages(request: HttpRequest, completion_id: str) -> JsonResponse:
    """`GET /v1/chat/completions/{id}/messages`: the request's messages, a page at a time."""
    method(request, "GET")
    user = await api_user(request)
    return JsonResponse(await sync_to_async(_messages)(request, user, completion_id))
