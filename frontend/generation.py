"""One assistant answer being generated: engine stream in, protocol frames out.

A `Generation` runs as its own asyncio task beside the consumer's receive loop, so
`chat.stop` and disconnects are handled while tokens flow. Stopping cancels the
task; cancelling closes the engine stream, which aborts the engine request. The
message row is written once, when the answer ends, whichever way it ends.
"""

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing

from channels.db import database_sync_to_async
from django.conf import settings

from frontend import services
from frontend.models import Message
from inference.client import ChatRequest, Completion, EngineClient, EngineError
from inference.prompt import PromptTooLong, assemble

log = logging.getLogger(__name__)

Send = Callable[[dict], Awaitable[None]]

STOP_REASONS = {
    "user": "Stopped by the user.",
    "disconnect": "The connection closed before the answer finished.",
}


def cache_salt_for(user_id: int) -> str | None:
    """A per-user salt so the prefix cache never serves one user's history to another."""
    if not settings.CHAT_CACHE_SALT_PER_USER:
        return None
    return hashlib.sha256(f"{settings.SECRET_KEY}:cache-salt:{user_id}".encode()).hexdigest()[:32]


def _dropped_note(dropped: int) -> str:
    if not dropped:
        return ""
    turns = "turn" if dropped == 1 else "turns"
    return (
        f"The {dropped} oldest {turns} of this conversation were left out of the prompt "
        "to fit the model's context window."
    )


def _error_code(exc: Exception) -> tuple[str, str]:
    if isinstance(exc, EngineError):
        return exc.code, exc.detail
    if isinstance(exc, PromptTooLong):
        return "prompt_too_long", str(exc)
    return "internal_error", "The answer failed unexpectedly."


class Generation:
    def __init__(self, turn: services.Turn, *, user_id: int, engine: EngineClient, send: Send):
        self.turn = turn
        self.message_id = turn.assistant_message_id
        self._user_id = user_id
        self._engine = engine
        self._send = send
        self._stop_reason = "user"
        self._parts: list[str] = []
        self.task: asyncio.Task | None = None

    def start(self) -> asyncio.Task:
        self.task = asyncio.create_task(self._run(), name=f"generation-{self.message_id}")
        return self.task

    def stop(self, reason: str) -> None:
        self._stop_reason = reason
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        started = time.monotonic()
        ttft_ms: float | None = None
        note = ""
        seq = 0
        completion = Completion(finish_reason="")

        def elapsed_ms() -> float:
            return round((time.monotonic() - started) * 1000, 1)

        try:
            prompt = await assemble(
                self.turn.system_prompt,
                self.turn.history,
                context_window=settings.INFERENCE_MAX_MODEL_LEN,
                answer_budget=settings.CHAT_MAX_TOKENS,
                count_tokens=self._engine.count_prompt_tokens,
            )
            note = _dropped_note(prompt.dropped_turns)
            request = ChatRequest(
                messages=prompt.messages,
                max_tokens=settings.CHAT_MAX_TOKENS,
                temperature=settings.CHAT_TEMPERATURE,
                priority=settings.CHAT_PRIORITY,
                cache_salt=cache_salt_for(self._user_id),
                request_id=f"chat-{self.message_id}",
            )
            # aclosing: a stop closes the engine stream at once, which aborts the request.
            async with aclosing(self._engine.stream_chat(request)) as events:
                async for event in events:
                    if isinstance(event, Completion):
                        completion = event
                        continue
                    if ttft_ms is None:
                        ttft_ms = elapsed_ms()
                    self._parts.append(event.text)
                    await self._send(
                        {"type": "chat.token", "message": self.message_id, "seq": seq, "text": event.text}
                    )
                    seq += 1
        except asyncio.CancelledError:
            await self._finish(
                status=Message.Status.STOPPED,
                finish_reason="abort",
                note=" ".join(filter(None, [note, STOP_REASONS[self._stop_reason]])),
                ttft_ms=ttft_ms,
                duration_ms=elapsed_ms(),
            )
            if self._stop_reason == "user":
                await self._send(self._done_frame("stopped", "abort", Completion(""), ttft_ms))
            raise
        except Exception as exc:
            code, detail = _error_code(exc)
            if code == "internal_error":
                log.exception("generation %s failed", self.message_id)
            else:
                log.warning("generation %s failed: %s %s", self.message_id, code, detail)
            await self._finish(
                status=Message.Status.ERROR,
                error_code=code,
                note=" ".join(filter(None, [note, detail])),
                ttft_ms=ttft_ms,
                duration_ms=elapsed_ms(),
            )
            await self._send(
                {"type": "chat.error", "code": code, "detail": detail, "message": self.message_id}
            )
            return
        await self._finish(
            status=Message.Status.COMPLETE,
            finish_reason=completion.finish_reason,
            note=note,
            prompt_tokens=completion.prompt_tokens,
            cached_tokens=completion.cached_tokens,
            completion_tokens=completion.completion_tokens,
            ttft_ms=ttft_ms,
            duration_ms=elapsed_ms(),
        )
        done = self._done_frame("complete", completion.finish_reason, completion, ttft_ms)
        done["note"] = note
        await self._send(done)

    def _done_frame(self, status: str, finish_reason: str, completion: Completion, ttft_ms) -> dict:
        return {
            "type": "chat.done",
            "message": self.message_id,
            "status": status,
            "finish_reason": finish_reason,
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "cached_tokens": completion.cached_tokens,
                "completion_tokens": completion.completion_tokens,
            },
            "ttft_ms": ttft_ms,
        }

    async def _finish(self, **fields) -> None:
        await database_sync_to_async(services.message_finish)(
            message_id=self.message_id, content="".join(self._parts), **fields
        )
