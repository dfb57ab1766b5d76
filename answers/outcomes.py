"""How an answer's end is told: the stored status, error code and note of each way it ends
(docs/protocol.md has the codes)."""

import logging
from dataclasses import asdict, dataclass, field

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from answers import metrics
from answers.deadlines import AnswerTimeout
from answers.status import AnswerStatus
from inference import state as engine_state
from inference.client import EngineError
from inference.prompt import PromptTooLong


@dataclass(frozen=True)
class Outcome:
    """How an answer ended: what is stored (`stored()`) and what its reader is told."""

    status: str
    finish_reason: str = ""
    note: str = ""
    error_code: str = ""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_ms: float | None = None
    duration_ms: float | None = None
    # A failure's detail and extras (retry_after), for its reader.
    detail: str = ""
    extra: dict = field(default_factory=dict)

    def stored(self) -> dict:
        """The fields of the stored answer (conversations.turns.message_finish)."""
        fields = asdict(self)
        del fields["detail"], fields["extra"]
        return fields


log = logging.getLogger(__name__)

# What the readers of an answer that lost its engine are told while it waits (answers.run).
ENGINE_WAIT_DETAIL = (
    "The engine went away (a restart, or a replica lost); the answer goes on when it is back."
)

STOP_NOTES = {
    "user": "Stopped by the user.",
    "disconnect": "The HTTP client went away before the answer finished.",
    "api_client": "The API client went away before the answer finished.",
    "draining": "The server restarted before the answer finished.",
}


def dropped_note(dropped: int) -> str:
    if not dropped:
        return ""
    turns = "turn" if dropped == 1 else "turns"
    return (
        f"The {dropped} oldest {turns} of this conversation were left out of the prompt "
        "to fit the model's context window."
    )


def failure(exc: Exception) -> tuple[str, str, str]:
    """(status, code, detail) for an answer that failed with `exc`."""
    if isinstance(exc, AnswerTimeout):
        return AnswerStatus.TIMEOUT, exc.code, exc.detail
    if isinstance(exc, PromptTooLong):
        return AnswerStatus.ERROR, "prompt_too_long", str(exc)
    if isinstance(exc, EngineError):
        status = AnswerStatus.ERROR if exc.code == "engine_rejected" else AnswerStatus.INTERRUPTED
        return status, exc.code, exc.detail
    if isinstance(exc, RedisError):
        return AnswerStatus.INTERRUPTED, "stream_unavailable", "The token stream store is unavailable."
    return AnswerStatus.ERROR, "internal_error", "The answer failed unexpectedly."


async def reported_failure(r: aioredis.Redis, exc: Exception, answer: str) -> tuple[str, str, str]:
    """`failure(exc)` for an answer that failed, counted and logged; while the engine is on its
    way up, its detail says so (inference.state) instead of naming an error. `answer` names it in the log."""
    status, code, detail = failure(exc)
    if code == "engine_unavailable":
        detail = engine_state.unavailable_detail(await engine_state.aread(r), detail)
    if isinstance(exc, EngineError | AnswerTimeout):
        metrics.engine_error(code)
    if code == "internal_error":
        log.exception("%s failed", answer)
    else:
        log.warning("%s failed: %s %s", answer, code, detail)
    return status, code, detail
