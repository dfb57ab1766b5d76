"""One line of a batch, run in the bulk worker as the synchronous API runs its request: the same
checks (openai_api.protocol), the owner's model access and daily quota, the owner's prefix-cache
salt, at the bulk priority; a line past the quota fails with `quota_exceeded` and is not billed.
The lines a runner claims together are checked together (the owner, their models and their quota
read once), as that many requests arriving at once would be. The job's document holds the input
line as it was sent ({custom_id, method, url, body})."""

import time
import uuid
from contextlib import aclosing

import orjson
from django.conf import settings
from django.contrib.auth import get_user_model

from answers.run import cache_salt_for
from httpkit.errors import Refusal
from inference.access import models_for
from inference.client import ChatRequest, Completion, EngineClient, EngineError
from inference.engine import embedding_client
from jobs.claims import Claim
from jobs.kinds import LineRefused, LineRun
from jobs.summarize import Summary
from openai_api import protocol
from usage.services import usage_check

CHAT, EMBEDDINGS = "/v1/chat/completions", "/v1/embeddings"
ENDPOINTS = (CHAT, EMBEDDINGS)


def line_request(url: str, body: object) -> protocol.ChatCompletionRequest | protocol.EmbeddingRequest:
    """A line's body checked as its endpoint checks it (Refusal); a batch line does not stream."""
    if url == EMBEDDINGS:
        return protocol.embedding_request(body)
    request = protocol.chat_completion_request(body)
    if request.stream:
        raise Refusal("unsupported_field", "a batch line cannot stream", param="stream")
    return request


def line_allowed(url: str, request, *, models: list[str]) -> None:
    """The owner's access to the line's model, from their chat `models` (Refusal)."""
    allowed = [settings.EMBEDDING_MODEL_NAME] if url == EMBEDDINGS else models
    if request.model not in allowed:
        raise Refusal("model_not_found", f"The model '{request.model}' does not exist.", param="model")


def lines_admitted(owner_id: int, claims: list[Claim]) -> dict[int, tuple[str, object] | LineRefused]:
    """Each claimed line's (url, checked request), or the LineRefused that fails it: its body's
    checks, then the owner's access to its model, then their quota."""
    user = get_user_model().objects.get(pk=owner_id)
    models = models_for(user=user)
    try:
        usage_check(user=user)
    except Refusal as refusal:
        spent = LineRefused(refusal.code, refusal.detail)
    else:
        spent = None
    admitted: dict[int, tuple[str, object] | LineRefused] = {}
    for claim in claims:
        line = orjson.loads(claim.text)
        try:
            request = line_request(line["url"], line["body"])
            line_allowed(line["url"], request, models=models)
        except Refusal as refusal:
            admitted[claim.document_id] = LineRefused(refusal.code, refusal.detail)
        else:
            admitted[claim.document_id] = spent or (line["url"], request)
    return admitted


def line_runner(owner_id: int, engine: EngineClient) -> LineRun:
    async def run(claim: Claim, admitted: tuple[str, object]) -> Summary:
        url, request = admitted
        if url == EMBEDDINGS:
            return await _embeddings(request)
        return await _chat(engine, request, owner_id, f"batch-{claim.document_id}-a{claim.attempt}")

    return run


async def _chat(
    engine: EngineClient, chat: protocol.ChatCompletionRequest, owner_id: int, request_id: str
) -> Summary:
    request = ChatRequest(
        messages=chat.messages,
        max_tokens=chat.max_tokens,
        min_tokens=chat.min_tokens,
        temperature=chat.temperature,
        priority=settings.BULK_PRIORITY,
        cache_salt=cache_salt_for(owner_id),
        request_id=request_id,
        sampling=chat.sampling,
        model=chat.model,
        whole=True,
    )
    parts: list[str] = []
    completion = Completion(finish_reason="")
    async with aclosing(engine.stream_chat(request)) as events:
        async for event in events:
            if isinstance(event, Completion):
                completion = event
            else:
                parts.append(event.text)
    summary = Summary(text="".join(parts), finish_reason=completion.finish_reason)
    summary.add(completion)
    summary.body = protocol.completion(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=chat.model,
        text=summary.text,
        finish_reason=completion.finish_reason,
        usage=protocol.usage(
            completion.prompt_tokens, completion.cached_tokens, completion.completion_tokens
        ),
    )
    return summary


async def _embeddings(asked: protocol.EmbeddingRequest) -> Summary:
    try:
        vectors, tokens = await embedding_client().aembed_counted(asked.input, priority="bulk")
    except EngineError as exc:
        if exc.code == "busy":  # the embedding engine's queue is full: try the line later
            raise EngineError(exc.detail, code="engine_timeout") from None
        raise
    summary = Summary(engine_calls=1, prompt_tokens=tokens, finish_reason="stop")
    summary.body = protocol.embeddings(
        vectors=vectors, model=asked.model, prompt_tokens=tokens, encoding_format=asked.encoding_format
    )
    return summary
