"""Changes to the conversation store. Consumers and views call these; nothing else
writes messages."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from frontend import selectors
from frontend.models import Conversation, Message

TITLE_LENGTH = 60


class NotFound(Exception):
    pass


@dataclass(frozen=True)
class Turn:
    """A started chat turn: the stored user message and the assistant message to fill."""

    conversation_id: int
    user_message_id: int
    assistant_message_id: int
    system_prompt: str
    history: list[dict[str, str]]


def _title_from(content: str) -> str:
    line = " ".join(content.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


@transaction.atomic
def chat_turn_start(*, user: AbstractBaseUser, conversation_id: int | None, content: str) -> Turn:
    """Store the user's message and an empty assistant message marked generating."""
    if conversation_id is None:
        conversation = Conversation.objects.create(
            owner=user, title=_title_from(content), system_prompt=settings.CHAT_SYSTEM_PROMPT
        )
    else:
        conversation = selectors.conversation_get(user=user, conversation_id=conversation_id)
        if conversation is None:
            raise NotFound(conversation_id)
    user_message = Message.objects.create(conversation=conversation, role=Message.Role.USER, content=content)
    history = selectors.conversation_history(conversation=conversation)
    assistant = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        status=Message.Status.GENERATING,
        model_name=settings.INFERENCE_MODEL_NAME,
    )
    conversation.save(update_fields=["updated_at"])
    return Turn(
        conversation_id=conversation.pk,
        user_message_id=user_message.pk,
        assistant_message_id=assistant.pk,
        system_prompt=conversation.system_prompt,
        history=history,
    )


def message_finish(
    *,
    message_id: int,
    content: str,
    status: str,
    finish_reason: str = "",
    note: str = "",
    error_code: str = "",
    prompt_tokens: int | None = None,
    cached_tokens: int | None = None,
    completion_tokens: int | None = None,
    ttft_ms: float | None = None,
    duration_ms: float | None = None,
) -> None:
    """Write the final state of an assistant message, once, when it ends."""
    Message.objects.filter(pk=message_id).update(
        content=content,
        status=status,
        finish_reason=finish_reason,
        note=note,
        error_code=error_code,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=completion_tokens,
        ttft_ms=ttft_ms,
        duration_ms=duration_ms,
        finished_at=timezone.now(),
    )
