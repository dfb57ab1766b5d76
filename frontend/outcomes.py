"""How an answer's end is told: the stored status, error code and note of each way it ends
(docs/protocol.md has the codes)."""

from redis.exceptions import RedisError

from frontend.deadlines import AnswerTimeout
from frontend.models import Message
from inference.client import EngineError
from inference.prompt import PromptTooLong

STOP_NOTES = {
    "user": "Stopped by the user.",
    "disconnect": "The HTTP client went away before the answer finished.",
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
        return Message.Status.TIMEOUT, exc.code, exc.detail
    if isinstance(exc, PromptTooLong):
        return Message.Status.ERROR, "prompt_too_long", str(exc)
    if isinstance(exc, EngineError):
        status = Message.Status.ERROR if exc.code == "engine_rejected" else Message.Status.INTERRUPTED
        return status, exc.code, exc.detail
    if isinstance(exc, RedisError):
        return Message.Status.INTERRUPTED, "stream_unavailable", "The token stream store is unavailable."
    return Message.Status.ERROR, "internal_error", "The answer failed unexpectedly."
