"""Changes to a conversation that its owner asks for: create one, change its settings, rename,
pin or archive, share and unshare it, take a document out, show another version, delete it. The
inputs are checked here, against their documented bounds (docs/store.md). Turns are written by
conversations.turns, API exchanges by conversations.exchanges; nothing else writes the store. What
they refuse, they refuse with a Refusal (httpkit.errors)."""

import secrets

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from conversations import selectors
from conversations.models import Conversation, Message, SharedLink
from httpkit.errors import Refusal, not_found
from inference.access import models_for

TITLE_LENGTH = 60
TEMPERATURE_BOUNDS = (0.0, 2.0)


def title_from(content: str) -> str:
    line = " ".join(content.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _owned_conversation(user: AbstractBaseUser, conversation_id: int) -> Conversation:
    conversation = selectors.conversation_get(user=user, conversation_id=conversation_id)
    if conversation is None:
        raise not_found("conversation")
    return conversation


def _is_number(value: object, kind: type) -> bool:
    # JSON true/false arrive as bool, which Python counts as int.
    allowed = (int, float) if kind is float else (int,)
    return isinstance(value, allowed) and not isinstance(value, bool)


def _checked_settings(data: dict, user: AbstractBaseUser | None = None) -> dict:
    """Validate per-conversation settings against their documented bounds (docs/store.md); `model`
    against the models `user` may use."""
    checked = {}
    if "model" in data:
        model = data["model"]
        allowed = models_for(user=user) if user is not None else []
        if model not in allowed:
            raise Refusal("invalid_field", f"'model' must be one of {', '.join(allowed) or 'your models'}")
        checked["model_name"] = model
    if "system_prompt" in data:
        prompt = data["system_prompt"]
        if not isinstance(prompt, str):
            raise Refusal("invalid_field", "'system_prompt' must be a string")
        if len(prompt) > settings.CHAT_SYSTEM_PROMPT_MAX_CHARS:
            limit = settings.CHAT_SYSTEM_PROMPT_MAX_CHARS
            raise Refusal("too_large", f"'system_prompt' is longer than {limit} characters")
        checked["system_prompt"] = prompt
    if "temperature" in data:
        value = data["temperature"]
        low, high = TEMPERATURE_BOUNDS
        if value is not None and not (_is_number(value, float) and low <= value <= high):
            raise Refusal("invalid_field", f"'temperature' must be a number from {low:g} to {high:g} or null")
        checked["temperature"] = None if value is None else float(value)
    if "max_tokens" in data:
        value = data["max_tokens"]
        limit = settings.CHAT_MAX_TOKENS_LIMIT
        if value is not None and not (_is_number(value, int) and 1 <= value <= limit):
            raise Refusal("invalid_field", f"'max_tokens' must be an integer from 1 to {limit}, or null")
        checked["max_tokens"] = value
    if "min_tokens" in data:
        value = data["min_tokens"]
        limit = settings.CHAT_MAX_TOKENS_LIMIT
        if value is not None and not (_is_number(value, int) and 0 <= value <= limit):
            raise Refusal("invalid_field", f"'min_tokens' must be an integer from 0 to {limit}, or null")
        checked["min_tokens"] = value or None
    return checked


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


def conversation_rename(*, user: AbstractBaseUser, conversation_id: int, title: object) -> Conversation:
    if not isinstance(title, str) or not title.strip():
        raise Refusal("invalid_field", "'title' must be a non-empty string")
    if len(title) > 200:
        raise Refusal("too_large", "'title' is longer than 200 characters")
    conversation = _owned_conversation(user, conversation_id)
    conversation.title = " ".join(title.split())
    # A rename is not activity: the list keeps its order.
    Conversation.objects.filter(pk=conversation.pk).update(title=conversation.title)
    return conversation


def conversation_flag(*, user: AbstractBaseUser, conversation_id: int, data: dict) -> Conversation:
    """Pin or unpin, archive or unarchive (`pinned`, `archived`: booleans); its activity time stays."""
    conversation = _owned_conversation(user, conversation_id)
    flags = {name: data[name] for name in ("pinned", "archived") if name in data}
    if not flags or not all(isinstance(value, bool) for value in flags.values()):
        raise Refusal("invalid_field", "send 'pinned' and/or 'archived' as true or false")
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
