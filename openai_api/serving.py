"""One OpenAI-API answer: admitted, sent to the engine and timed as a chat answer is.

The chat's answers go through the store and a Redis stream because a browser may leave and
resume; an API client cannot resume, so its answer streams straight from the engine to the
response. What both share is everything that guards the engine: admission control (the same
slots and per-user rate), the user's cache salt, the chat's priority, its deadlines, the
circuit breaker of the engine client, and the metrics.

The engine is read by a task of its own, so the deadlines measure the engine and not how fast
the client reads; the response reads the task's queue. A client that goes away stops the
answer (`stop()`), which aborts the engine request. With `store`, the exchange is written to
the conversation store once it ends.
"""

import asyncio
import contextvars
import hashlib
import json
import logging
import time
from contextlib import aclosing

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

import redisconn
from frontend import admission, metrics, outcomes, services
from frontend.deadlines import Deadlines
from frontend.generation import cache_salt_for
from frontend.models import Message
from frontend.protocol import Refusal
from inference.client import ChatRequest, Completion, EngineClient, EngineError, TextDelta
from logcontext import bind_log_context
from openai_api import protocol
from usage.models import UsageDay
from usage.services import usage_check, usage_record

log = logging.getLogger(__name__)


def affinity(user_id: int, messages: list[dict[str, str]]) -> str:
    """A conversation's key for the router: a client resending a conversation sends its first
    messages again, so its turns land on the replica whose prefix cache holds them."""
    head = json.dumps(messages[:2], sort_keys=True).encode()
    return f"api-{user_id}-{hashlib.sha256(head).hexdigest()[:16]}"


class ApiAnswer:
    """One answer: its engine task, and the queue of what it sent: TextDelta, then one Completion,
    or the OpenAIError the answer failed with."""

    def __init__(self, *, user: AbstractBaseUser, chat: protocol.ChatCompletionRequest, engine: EngineClient):
        self.id = protocol.completion_id()
        self.created = int(time.time())
        self.chat = chat
        self._user = user
        self._engine = engine
        self._lease: admission.Lease | None = None
        self.events: asyncio.Queue[TextDelta | Completion | protocol.OpenAIError] = asyncio.Queue()
        self.task: asyncio.Task | None = None

    def _request(self) -> ChatRequest:
        return ChatRequest(
            messages=self.chat.messages,
            max_tokens=self.chat.max_tokens,
            min_tokens=self.chat.min_tokens,
            temperature=self.chat.temperature,
            priority=settings.CHAT_PRIORITY,
            cache_salt=cache_salt_for(self._user.pk),
            request_id=self.id,
            affinity=affinity(self._user.pk, self.chat.messages),
            sampling=self.chat.sampling,
            model=self.chat.model,
        )

    async def start(self) -> None:
        """Take an admission slot and start reading the engine; Refusal `quota_exceeded` when the
        user's daily quota is spent, `busy` when admission control is full."""
        await database_sync_to_async(usage_check)(user=self._user)
        try:
            self._lease = await admission.admit(redisconn.client(), user_id=self._user.pk)
        except Refusal as refusal:
            metrics.admission_refused(refusal.extra["reason"])
            raise
        # A fresh context: the task outlives the view's call, whose thread its ORM calls would use.
        self.task = asyncio.create_task(
            self._run(), name=f"api-answer-{self.id}", context=contextvars.Context()
        )

    def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def _run(self) -> None:
        bind_log_context(request_id=self.id)
        r = redisconn.client()
        keeper = asyncio.create_task(admission.hold(r, self._lease))
        loop = asyncio.get_running_loop()
        started = loop.time()
        clock = metrics.TokenClock(started)
        parts: list[str] = []
        ttft: float | None = None
        completion = Completion(finish_reason="")
        status, error_code, note = Message.Status.STOPPED, "", ""
        metrics.generation_started()
        try:
            async with Deadlines(started).enforced() as deadlines:
                async with aclosing(self._engine.stream_chat(self._request())) as stream:
                    async for event in stream:
                        if isinstance(event, TextDelta):
                            clock.tick(loop.time())
                            ttft = loop.time() - started if ttft is None else ttft
                            parts.append(event.text)
                            deadlines.token_arrived()
                        else:
                            completion = event
                        self.events.put_nowait(event)
            status = Message.Status.COMPLETE
        except asyncio.CancelledError:
            note = "The API client went away before the answer finished."
            raise
        except Exception as exc:
            status, error_code, note = await outcomes.reported_failure(r, exc, f"API answer {self.id}")
            retry_after = exc.extra.get("retry_after") if isinstance(exc, EngineError) else None
            self.events.put_nowait(protocol.OpenAIError.from_code(error_code, note, retry_after=retry_after))
        finally:
            keeper.cancel()
            await admission.release(r, self._lease)
            metrics.generation_ended()
            seconds = loop.time() - started
            metrics.generation_finished(status, completion.completion_tokens, seconds, ttft_seconds=ttft)
            finish_reasons = {
                Message.Status.COMPLETE: completion.finish_reason,
                Message.Status.STOPPED: "abort",
            }
            await self._record(
                content="".join(parts),
                status=status,
                error_code=error_code,
                note=note,
                finish_reason=finish_reasons.get(status, ""),
                prompt_tokens=completion.prompt_tokens,
                cached_tokens=completion.cached_tokens,
                # An answer cut short has no engine figures: its streamed tokens count (about one a delta).
                completion_tokens=completion.completion_tokens or len(parts),
                ttft_ms=None if ttft is None else round(ttft * 1000, 1),
                duration_ms=round(seconds * 1000, 1),
            )

    async def _record(self, **answer) -> None:
        """Count the answer's tokens, always, and store the exchange when the client asked to."""

        def record() -> None:
            usage_record(
                user_id=self._user.pk,
                source=UsageDay.Source.API,
                prompt_tokens=answer["prompt_tokens"],
                cached_tokens=answer["cached_tokens"],
                completion_tokens=answer["completion_tokens"],
            )
            if self.chat.store:
                services.api_exchange_store(
                    user=self._user, messages=self.chat.messages, model_name=self.chat.model, answer=answer
                )

        try:
            await database_sync_to_async(record)()
        except Exception:
            # The client has its answer already; a failed write is logged, not raised into it.
            log.exception("API answer %s could not be recorded", self.id)


async def answer_start(
    *, user: AbstractBaseUser, chat: protocol.ChatCompletionRequest, engine: EngineClient
) -> ApiAnswer:
    """Admit and start an answer; Refusal `quota_exceeded` or `busy` when it may not start."""
    answer = ApiAnswer(user=user, chat=chat, engine=engine)
    await answer.start()
    return answer
