"""HTTP for the OpenAI-compatible API: `POST /v1/chat/completions` (streamed or not),
`GET /v1/models` and `GET /v1/models/<name>`, each authenticated by an API token with the
`openai` scope. Errors are OpenAI's shape with its statuses (docs/openai-api.md)."""

import asyncio
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from httpkit.errors import Refusal, busy
from httpkit.json import read_json
from httpkit.sse import event_stream, sse_event
from inference.access import models_for
from inference.client import Completion, EngineError, TextDelta
from inference.engine import embedding_client, engine_client
from openai_api import protocol, serving, stored
from openai_api.http import api_user, checked_model, method, openai_errors
from usage.models import UsageDay
from usage.services import usage_check, usage_record


@openai_errors
async def models(request: HttpRequest) -> JsonResponse:
    method(request, "GET")
    user = await api_user(request)
    names = await sync_to_async(models_for)(user=user)
    return JsonResponse({"object": "list", "data": [protocol.model_entry(name) for name in names]})


@openai_errors
async def model(request: HttpRequest, name: str) -> JsonResponse:
    method(request, "GET")
    user = await api_user(request)
    return JsonResponse(protocol.model_entry(await checked_model(user, name)))


@openai_errors
async def chat_completions(request: HttpRequest) -> HttpResponse:
    """Answer a conversation the client sends whole, as one JSON completion or as SSE chunks; a GET
    lists the stored completions (openai_api.stored)."""
    if request.method == "GET":
        return await stored.completion_list(request)
    method(request, "POST")
    user = await api_user(request)
    chat = protocol.chat_completion_request(read_json(request, max_bytes=settings.API_MAX_REQUEST_BYTES))
    await checked_model(user, chat.model)
    answer = await serving.answer_start(user=user, chat=chat, engine=engine_client())
    try:
        first = await answer.events.get()
        if isinstance(first, Refusal):
            raise first
        if chat.stream:
            return event_stream(_chunks(answer, first))
        parts, event = [], first
        while isinstance(event, TextDelta):
            parts.append(event.text)
            event = await answer.events.get()
        if isinstance(event, Refusal):
            raise event
        await answer.task  # stored, and the slot given back, before the client hears of the end
    except BaseException:
        # A client that went away while the answer was read: the engine request is aborted.
        answer.stop()
        raise
    return JsonResponse(
        protocol.completion(
            id=answer.id,
            created=answer.created,
            model=chat.model,
            text="".join(parts),
            finish_reason=event.finish_reason,
            usage=protocol.usage(event.prompt_tokens, event.cached_tokens, event.completion_tokens),
            **_sources(answer),
        )
    )


def _sources(answer: serving.ApiAnswer) -> dict:
    """The passages the prompt quoted, where the request named collections (docs/openai-api.md)."""
    return {} if answer.sources is None else {"sources": answer.sources}


@openai_errors
async def embeddings(request: HttpRequest) -> JsonResponse:
    """The vectors of the texts the client sends, from the embedding engine, counted in its usage."""
    method(request, "POST")
    user = await api_user(request)
    asked = protocol.embedding_request(read_json(request, max_bytes=settings.API_MAX_REQUEST_BYTES))
    if asked.model != settings.EMBEDDING_MODEL_NAME:
        detail = f"The model '{asked.model}' does not exist; the embedding model is "
        raise Refusal("model_not_found", f"{detail}'{settings.EMBEDDING_MODEL_NAME}'.", param="model")
    await sync_to_async(usage_check)(user=user)
    try:
        vectors, tokens = await embedding_client().aembed_counted(asked.input, priority="query")
    except EngineError as exc:
        if exc.code == "busy":
            raise busy("embeddings", exc.extra.get("retry_after", 1.0)) from None
        raise Refusal("engine_unavailable", "The embedding engine is not answering.") from None
    await sync_to_async(usage_record)(
        user_id=user.pk,
        source=UsageDay.Source.API,
        prompt_tokens=tokens,
        cached_tokens=0,
        completion_tokens=0,
    )
    return JsonResponse(
        protocol.embeddings(
            vectors=vectors, model=asked.model, prompt_tokens=tokens, encoding_format=asked.encoding_format
        )
    )


async def _chunks(answer: serving.ApiAnswer, first: TextDelta | Completion) -> AsyncIterator[bytes]:
    chat = answer.chat
    ids = {"id": answer.id, "created": answer.created, "model": chat.model}
    # With include_usage every chunk carries `usage`, null until the last one.
    nothing = {"usage": None} if chat.include_usage else {}
    try:
        yield sse_event(protocol.chunk(**ids, delta={"role": "assistant", "content": ""}, **nothing))
        event = first
        while isinstance(event, TextDelta):
            yield sse_event(protocol.chunk(**ids, delta={"content": event.text}, **nothing))
            event = await answer.events.get()
        await asyncio.wait([answer.task])  # stored before the client hears of the end
        if isinstance(event, Refusal):
            yield sse_event(protocol.error_body(event))
        else:
            closing = {"finish_reason": event.finish_reason, **nothing, **_sources(answer)}
            yield sse_event(protocol.chunk(**ids, delta={}, **closing))
            if chat.include_usage:
                figures = protocol.usage(event.prompt_tokens, event.cached_tokens, event.completion_tokens)
                yield sse_event(protocol.chunk(**ids, delta=None, usage=figures))
        yield sse_event("[DONE]")
    finally:
        # The client went away (Django closes this iterator): abort the engine request.
        answer.stop()
        await asyncio.wait([answer.task])
