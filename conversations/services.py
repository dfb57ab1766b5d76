"""Changes to a conversation that its owner asks for: create one, change its settings, rename,
pin or archive, share and unshare it, take a document out, show another version, delete it. The
inputs are checked here, against their documented bounds (docs/store.md). Turns are written by
conversations.turns, API exchanges by conversations.exchanges; nothing else writes the store. What
they refuse, they refuse with a Refusal (httpkit.errors)."""

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from pydantic import Field, StrictBool, StrictStr, ValidationInfo, field_validator, model_validator

from conversations import selectors
from conversations.models import Conversation, Message, SharedLink
from httpkit.errors import Refusal, not_found
from httpkit.validation import Input, MaxTokens, MinTokens, Temperature, checked, refuse, text
from inference.access import models_for

TITLE_LENGTH = 60
TITLE_MAX_CHARS = 200
FLAGS = "send 'pinned' and/or 'archived' as true or false"


def title_from(content: str) -> str:
    line = " ".join(content.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _owned_conversation(user: AbstractBaseUser, conversation_id: int) -> Conversation:
    conversation = selectors.conversation_get(user=user, conversation_id=conversation_id)
    if conversation is None:
        raise not_found("conversation")
    return conversation


class ConversationSettings(Input):
    """Per-conversation settings, each within its documented bounds (docs/store.md); `model` one of
    those the user may use (the `user` of the validation's context). Only the fields sent change."""

    model: Any = None
    system_prompt: StrictStr = Field(None, description="'system_prompt' must be a string")
    temperature: Temperature | None = Field(
        None, description="'temperature' must be a number from 0 to 2 or null"
    )
    max_tokens: MaxTokens | None = Field(
        None, description="'max_tokens' must be an integer from 1 to {CHAT_MAX_TOKENS_LIMIT}, or null"
    )
    min_tokens: MinTokens | None = Field(
        None, description="'min_tokens' must be an integer from 0 to {CHAT_MAX_TOKENS_LIMIT}, or null"
    )

    @field_validator("model")
    @classmethod
    def _allowed(cls, model: object, info: ValidationInfo) -> str:
        user = info.context.get("user")
        allowed = models_for(user=user) if user is not None else []
        if model not in allowed:
            raise refuse("invalid_field", f"'model' must be one of {', '.join(allowed) or 'your models'}")
        return model

    @field_validator("system_prompt")
    @classmethod
    def _fits(cls, prompt: str) -> str:
        if len(prompt) > settings.CHAT_SYSTEM_PROMPT_MAX_CHARS:
            raise refuse(
                "too_large", "'system_prompt' is longer than {CHAT_SYSTEM_PROMPT_MAX_CHARS} characters"
            )
        return prompt


def _checked_settings(data: dict, user: AbstractBaseUser | None = None) -> dict:
    """The settings `data` changes, as the conversation's fields."""
    changed = checked(ConversationSettings, data, user=user)
    fields = {
        "model_name" if name == "model" else name: getattr(changed, name) for name in changed.model_fields_set
    }
    if "min_tokens" in fields:
        fields["min_tokens"] = fields["min_tokens"] or None
    return fields


def conversation_create(*, user: AbstractBaseUser, settings_data: dict | None = None) -> Conversation:
    """An empty conversation, so its settings can be chosen before the first message."""
    checked = _checked_settings(settings_data or {}, user)
    checked.setdefault("system_prompt", settings.CHAT_SYSTEM_PROMPT)
    return Conversation.objects.create(owner=user, **checked)


def conversation_update_settings(*, user: AbstractBaseUser, conversation_id: int, data: dict) -> Conversation:
    """Change system prompt, temperature or answer length bounds; they apply from the next answer on."""
    conversation = _owned_conversation(user, conversation_id)
    checked = _checked_settings(data, user)
    if (
        "model_name" in checked
        and checked["model_name"] != conversation.model_name
        and conversation.messages.exists()
    ):
        raise Refusal("invalid_field", "a conversation keeps its model once it has messages; start a new one")
    for name, value in checked.items():
        setattr(conversation, name, value)
    conversation.save(update_fields=[*checked, "updated_at"])
    return conversation


Title = text(TITLE_MAX_CHARS)


class Rename(Input):
    title: Title = Field(None, validate_default=True)


class Flags(Input):
    """Either or both: an explicit null is no flag."""

    pinned: StrictBool = Field(None, description=FLAGS)
    archived: StrictBool = Field(None, description=FLAGS)

    @model_validator(mode="after")
    def _some(self) -> "Flags":
        if not self.model_fields_set & {"pinned", "archived"}:
            raise refuse("invalid_field", FLAGS)
        return self


def conversation_rename(*, user: AbstractBaseUser, conversation_id: int, title: object) -> Conversation:
    title = checked(Rename, {"title": title}).title
    conversation = _owned_conversation(user, conversation_id)
    conversation.title = " ".join(title.split())
    # A rename is not activity: the list keeps its order.
    Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
    return conversation


def conversation_flag(*, user: AbstractBaseUser, conversation_id: int, data: dict) -> Conversation:
    """Pin or unpin, archive or unarchive (`pinned`, `archived`: booleans); its activity time stays."""
    conversation = _owned_conversation(user, conversation_id)
    flags = checked(Flags, data).model_dump(include={"pinned", "archived"}, exclude_unset=True)
    Conversation.objects.filter(pk=conversation.pk).update(**flags)
    for name, value in flags.items():
        setattr(conversation, name, value)
    return conversation


def conversation_share(*, user: AbstractBaseUser, conversation_id: int) -> SharedLink:
    """A read-only link to the version shown now: a snapshot of its finished messages."""
    conversation = _owned_conversation(user, conversation_id)
    path = [
        {"role": m.role, "content": m.content}
        for m in selectors.conversation_path(conversation)
        if m.content and m.status != Message.Status.GENERATING
    ]
    if not path:
        raise Refusal("invalid_field", "there is nothing to share in this conversation yet")
    return SharedLink.objects.create(
        conversation=conversation,
        token=secrets.token_urlsafe(24),
        snapshot={"title": conversation.title, "messages": path},
    )


def conversation_unshare(*, user: AbstractBaseUser, conversation_id: int) -> int:
    """Revoke every live link to the conversation; how many there were."""
    conversation = _owned_conversation(user, conversation_id)
    return conversation.shared_links.filter(revoked_at=None).update(revoked_at=timezone.now())


def conversation_document_remove(*, user: AbstractBaseUser, conversation_id: int, document_id: int) -> None:
    """Take a document out of the conversation: the next turn's prompt no longer holds it."""
    conversation = _owned_conversation(user, conversation_id)
    if not conversation.documents.filter(pk=document_id).delete()[0]:
        raise not_found("document")


def conversation_delete(*, user: AbstractBaseUser, conversation_id: int) -> None:
    _owned_conversation(user, conversation_id).delete()


def conversation_show(*, user: AbstractBaseUser, conversation_id: int, message_id: int) -> Message:
    """Show the version containing `message_id`: its newest continuation becomes the current leaf."""
    conversation = _owned_conversation(user, conversation_id)
    message = conversation.messages.filter(pk=message_id).first()
    if message is None:
        raise not_found("message")
    leaf = selectors.latest_leaf(message=message)
    Conversation.objects.filter(pk=conversation.pk).update(current_leaf=leaf)
    return leaf
