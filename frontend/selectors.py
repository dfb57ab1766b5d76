"""Reads of the conversation store, always scoped to the requesting user."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from frontend.models import Conversation, Message


def conversation_list(*, user: AbstractBaseUser) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user)


def conversation_get(*, user: AbstractBaseUser, conversation_id: int) -> Conversation | None:
    """The user's conversation, or None: another user's id reads as missing."""
    return Conversation.objects.filter(owner=user, pk=conversation_id).first()


def message_get(*, user: AbstractBaseUser, message_id: int) -> Message | None:
    return Message.objects.filter(conversation__owner=user, pk=message_id).first()


def conversation_history(*, conversation: Conversation) -> list[dict[str, str]]:
    """Messages that belong in the prompt, oldest first, as chat messages.

    Stopped answers count (the user saw them); failed or empty ones do not.
    """
    rows = conversation.messages.filter(status__in=[Message.Status.COMPLETE, Message.Status.STOPPED]).exclude(
        content=""
    )
    return [{"role": m.role, "content": m.content} for m in rows]


def message_as_dict(message: Message) -> dict:
    return {
        "id": message.pk,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "note": message.note,
        "error_code": message.error_code,
        "finish_reason": message.finish_reason,
        "usage": {
            "prompt_tokens": message.prompt_tokens,
            "cached_tokens": message.cached_tokens,
            "completion_tokens": message.completion_tokens,
        },
        "ttft_ms": message.ttft_ms,
        "duration_ms": message.duration_ms,
    }
