"""One OpenAI-API answer: the life every answer has (answers.run), with the HTTP response as its sink.

The chat's answers go through a Redis stream because a browser may leave and resume; an API
client cannot resume, so its tokens go straight to the response, through `events`: TextDelta,
then one Completion, or the Refusal the answer failed with. What the run shares with the chat
is everything that guards the engine and counts: admission control (the same slots and per-user
rate), the user's cache salt, the chat's priority, its deadlines, the circuit breaker of the engine
client, the metrics, the usage record with the prompt of a stopped request, the heartbeat.

A client that goes away stops the answer (`stop()`), which aborts the engine request. With
`store`, the exchange is written to the conversation store once it ends. A process that dies
mid-answer ends its client's connection (there is nothing to resume); another web process that
finds the answer's heartbeat stale records what its last heartbeat said of it (answers.takeover):
its usage, and with `store` the exchange with the text the client had received by then.
"""

import asyncio
import contextvars
import hashlib
import json
import logging
import time
from dataclasses import dataclass

import orjson
import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

import redisconn
from answers import admission, ownership, watcher
from answers.outcomes import Outcome
from answers.run import AnswerRun, cache_salt_for
from answers.status import AnswerStatus
from conversations import exchanges
from httpkit.errors import Refusal
from inference.client import ChatRequest, Completion, EngineClient, EngineError, TextDelta
from knowledge import context, quotes, search, selectors
from openai_api import protocol
from usage.models import UsageDay
from usage.services import usage_check, usage_record

log = logging.getLogger(__name__)

ABANDONED = "The web process answering this request stopped before it finished."


def affinity(user_id: int, messages: list[dict[str, str]]) -> str:
    """A conversation's key for the router: a client resending a conversation sends its first
    messages again, so its turns land on the replica whose prefix cache holds them."""
    head = json.dumps(messages[:2], sort_keys=True).encode()
    return f"api-{user_id}-{hashlib.sha256(head).hexdigest()[:16]}"


class ApiAnswer(AnswerRun):
    """One answer, and the queue of what it sent: TextDelta, then one Completion, or the Refusal
    the answer failed with."""

    usage_source = UsageDay.Source.API
    continuable = False

    def __init__(
        self,
        *,
        user: AbstractBaseUser,
        chat: protocol.ChatCompletionRequest,
        engine: EngineClient,
        owner: ownership.Claim,
        lease: admission.Lease,
        answer_id: str,
        quoted: "Quoted | None" = None,
    ):
        super().__init__(user_id=user.pk, engine=engine, owner=owner, lease=lease)
        self.id = answer_id
        self.created = int(time.time())
        self.chat = chat
        # What the engine gets: the client's messages, the last question with its quoted passages.
        self.messages = quoted.messages if quoted else chat.messages
        self.sources = quoted.sources if quoted else None
        self._user = user
        self.events: asyncio.Queue[TextDelta | Completion | Refusal] = asyncio.Queue()

    def log_context(self) -> dict:
        return {"request_id": self.id}

    def stop(self, reason: str = "api_client") -> None:
        """The client went away (or the process drains): the engine request is aborted."""
        super().stop(reason)

    def so_far(self) -> dict:
        figures = {"prompt_tokens": self.prompt_tokens or 0, "completion_tokens": self.seq}
        return {**figures, "content": "".join(self.parts)} if self.chat.store else figures

    async def request(self) -> ChatRequest:
        return ChatRequest(
            messages=self.messages,
            max_tokens=self.chat.max_tokens,
            min_tokens=self.chat.min_tokens,
            temperature=self.chat.temperature,
            priority=settings.CHAT_PRIORITY,
            cache_salt=cache_salt_for(self.user_id),
            request_id=self.id,
            affinity=affinity(self.user_id, self.chat.messages),
            sampling=self.chat.sampling,
            model=self.chat.model,
        )

    async def token(self, r: aioredis.Redis, seq: int, text: str) -> None:
        self.events.put_nowait(TextDelta(text))

    async def finish(self, r: aioredis.Redis, outcome: Outcome) -> None:
        # Recorded before the client hears of the end (a stopped answer's client has gone).
        try:
            await database_sync_to_async(self._record)(outcome)
        except Exception:
            # The client has its answer; a failed write is logged, not raised into it.
            log.exception("API answer %s could not be recorded", self.id)
        if outcome.status == AnswerStatus.COMPLETE:
            self.events.put_nowait(
                Completion(
                    outcome.finish_reason,
                    prompt_tokens=outcome.prompt_tokens,
                    cached_tokens=outcome.cached_tokens,
                    completion_tokens=outcome.completion_tokens,
                )
            )
        elif outcome.error_code:
            retry_after = outcome.extra.get("retry_after")
            self.events.put_nowait(Refusal(outcome.error_code, outcome.detail, retry_after=retry_after))

    def _record(self, outcome: Outcome) -> None:
        """Count the answer's tokens, always, and store the exchange when the client asked to."""
        self.record_usage(outcome)
        if self.chat.store:
            answer = {**outcome.stored(), "completion_tokens": outcome.completion_tokens or self.seq}
            exchanges.api_exchange_store(
                user=self._user,
                messages=self.chat.messages,
                model_name=self.chat.model,
                answer={**answer, "content": "".join(self.parts)},
                completion_id=self.id,
                metadata=self.chat.metadata,
            )


@dataclass(frozen=True)
class Quoted:
    """The client's messages with the passages its `collections` give quoted in the last user message
    (knowledge.context), and those passages as the response names them (`sources`)."""

    messages: list[dict[str, str]]
    sources: list[dict]


async def quoted(user: AbstractBaseUser, chat: protocol.ChatCompletionRequest) -> Quoted:
    """Retrieve for the last user message from the collections the request names; `not_found` for
    one the user may not read, `engine_unavailable` while the embedding engine does not answer."""
    wanted = list(dict.fromkeys(chat.collections))
    readable = await database_sync_to_async(selectors.collection_ids_checked)(user, wanted)
    last = max(i for i, message in enumerate(chat.messages) if message["role"] == "user")
    question = chat.messages[last]["content"]
    try:
        found = await search.question_passages(question, readable)
    except EngineError:
        detail = "The embedding engine is not answering, so the collections could not be searched."
        raise Refusal("engine_unavailable", detail) from None
    numbered = context.new_passages(found, {}, budget=settings.KNOWLEDGE_PASSAGE_TOKENS)
    messages = list(chat.messages)
    messages[last] = {"role": "user", "content": context.user_content(question, numbered, [])}
    return Quoted(messages, [quotes.source_as_dict(n, p) for n, p in numbered])


async def answer_start(
    *, user: AbstractBaseUser, chat: protocol.ChatCompletionRequest, engine: EngineClient
) -> ApiAnswer:
    """Admit and start an answer; Refusal `quota_exceeded` when the user's daily quota is spent,
    `busy` when admission control is full (or this process drains), and a refusal of `quoted`."""
    await database_sync_to_async(usage_check)(user=user)
    passages = await quoted(user, chat) if chat.collections else None
    r = redisconn.client()
    lease = await admission.admit_answer(r, user_id=user.pk)
    answer_id = protocol.completion_id()
    # What a process that finds it dead needs to record it.
    stored = {"messages": chat.messages, "model": chat.model, "metadata": chat.metadata}
    record = {"store": orjson.dumps(stored).decode()} if chat.store else {}
    async with r.pipeline(transaction=True) as pipe:
        owner = ownership.register_in(
            pipe, ownership.API_PREFIX + answer_id, user_id=user.pk, lease=lease.member, **record
        )
        await pipe.execute()
    answer = ApiAnswer(
        user=user, chat=chat, engine=engine, owner=owner, lease=lease, answer_id=answer_id, quoted=passages
    )
    # A fresh context: the task outlives the view's call, whose thread its ORM calls would use.
    contextvars.Context().run(answer.start)
    return answer


async def take_over(r: aioredis.Redis, claim: ownership.Claim, engine: EngineClient) -> None:
    """An API answer claimed from a dead process (answers.takeover): its client's connection died
    with it, so it is recorded, not continued, and its slot given back."""
    record = await ownership.record(r, claim)
    await database_sync_to_async(abandoned_record)(claim, record)
    await watcher.release_answer(
        r, claim, admission.Lease(claim.user_id, claim.lease) if claim.lease else None
    )
    log.info("API answer %s of a process that stopped: recorded", claim.answer)


def abandoned_record(claim: ownership.Claim, record: dict[str, str]) -> None:
    """Record an API answer whose process died, from its last heartbeat: its usage, and with
    `store` the exchange as far as its client received it (answers.takeover); nothing when its
    user was deleted meanwhile (their usage and exchanges went with them)."""
    user = get_user_model().objects.filter(pk=claim.user_id).first()
    if user is None:
        return
    completion = int(record.get("completion_tokens") or 0)
    usage_record(
        user_id=claim.user_id,
        source=UsageDay.Source.API,
        prompt_tokens=int(record.get("prompt_tokens") or 0),
        cached_tokens=None,
        completion_tokens=completion,
    )
    if "store" in record:
        request = orjson.loads(record["store"])
        exchanges.api_exchange_store(
            user=user,
            messages=request["messages"],
            model_name=request["model"],
            completion_id=claim.answer.removeprefix(ownership.API_PREFIX),
            metadata=request.get("metadata"),
            answer={
                "content": record.get("content", ""),
                "status": "interrupted",
                "error_code": "interrupted",
                "note": ABANDONED,
                "prompt_tokens": int(record.get("prompt_tokens") or 0) or None,
                "completion_tokens": completion or None,
            },
        )
