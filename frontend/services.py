"""Changes to the conversation store. Consumers and views call these; nothing else
writes messages. What they refuse, they refuse with a Refusal (httpkit.errors).

Why one module of about 520 lines: every write to the store is here, so the rules that keep
a conversation tree consistent (ownership, parents, the shown leaf, settings bounds) are
checked in one place; each function is short and independent."""

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import orjson
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

import redisconn
from frontend import protocol, selectors
from frontend.models import Conversation, Message, SharedLink
from httpkit.errors import Refusal, not_found
from inference.access import models_for
from inference.engine import default_model
from redisconn import keys

TITLE_LENGTH = 60
TEMPERATURE_BOUNDS = (0.0, 2.0)


@dataclass(frozen=True)
class Turn:
    """A started chat turn: the stored user message and the assistant message to fill."""

    conversation_id: int
    user_message_id: int
    assistant_message_id: int
    system_prompt: str
    history: list[dict[str, str]]
    temperature: float
    max_tokens: int
    min_tokens: int = 0
    model: str | None = None
    # The answer's text before this turn's stream: empty for a new answer, the text so far for one
    # continued past its length limit (chat_turn_continue), which the stream's tokens extend.
    prefix: str = ""


def _title_from(content: str) -> str:
    line = " ".join(content.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


def _owned_message(user: AbstractBaseUser, message_id: int, role: str) -> Message:
    message = selectors.message_get(user=user, message_id=message_id)
    if message is None:
        raise not_found("message")
    if message.role != role:
        raise Refusal("invalid_field", f"message {message_id} is not a {role} message")
    return message


def _refuse_if_busy(conversation: Conversation, messages: Iterable[Message] | None = None) -> None:
    """One answer at a time in a conversation; checked inside the transaction that stores the turn.

    `messages`, the conversation's messages when the caller has them, saves a query."""
    if messages is None:
        busy = conversation.messages.filter(status=Message.Status.GENERATING).exists()
    else:
        busy = any(m.status == Message.Status.GENERATING for m in messages)
    if busy:
        raise Refusal(
            "conversation_busy",
            "an answer is still being generated in this conversation",
            conversation=conversation.pk,
        )


def _available_model(conversation: Conversation, model: str) -> str:
    """`model` (empty: the default), refused unless its owner may use it."""
    model = model or default_model()
    # The default model is everyone's (inference.access): the common case costs no query.
    if model != default_model() and model not in models_for(user=conversation.owner):
        raise Refusal("invalid_field", f"the model {model!r} of this conversation is not available to you")
    return model


def _answer(
    conversation: Conversation,
    user_message: Message,
    earlier: list[Message] | None = None,
    *,
    new: bool = False,
) -> Turn:
    """Add an empty assistant answer to `user_message` and show it.

    `earlier`, the path down to the user message's parent when the caller has it, saves a query;
    so does `new` (a conversation made in this call has no documents yet)."""
    model = _available_model(conversation, conversation.model_name)
    assistant = Message.objects.create(
        conversation=conversation,
        parent=user_message,
        role=Message.Role.ASSISTANT,
        status=Message.Status.GENERATING,
        model_name=model,
    )
    conversation.current_leaf = assistant
    conversation.save(update_fields=["current_leaf", "updated_at"])
    return _turn(
        conversation,
        assistant,
        system_prompt=conversation.system_prompt if new else selectors.conversation_preamble(conversation),
        history=(
            selectors.conversation_history(leaf=user_message)
            if earlier is None
            else selectors.prompt_history([*earlier, user_message])
        ),
    )


def _turn(conversation: Conversation, assistant: Message, *, system_prompt: str, history: list) -> Turn:
    # A generating answer's stored text is what came before its stream (chat_turn_continue).
    return Turn(
        conversation_id=conversation.pk,
        user_message_id=assistant.parent_id,
        assistant_message_id=assistant.pk,
        system_prompt=system_prompt,
        history=history,
        temperature=(
            settings.CHAT_TEMPERATURE if conversation.temperature is None else conversation.temperature
        ),
        max_tokens=conversation.max_tokens or settings.CHAT_MAX_TOKENS,
        min_tokens=conversation.min_tokens or 0,
        model=assistant.model_name,
        prefix=assistant.content,
    )


def chat_turn_of_answer(*, message_id: int) -> Turn | None:
    """The turn of an answer still generating, for the process that continues it
    (answers.takeover); None when it has ended or is gone."""
    answer = (
        Message.objects.select_related("conversation", "parent")
        .filter(pk=message_id, role=Message.Role.ASSISTANT, status=Message.Status.GENERATING)
        .first()
    )
    if answer is None or answer.parent is None:
        return None
    return _turn_of(answer)


def _turn_of(answer: Message) -> Turn:
    """The turn of an answer already stored (continued by another process, or past its limit)."""
    conversation = answer.conversation
    return _turn(
        conversation,
        answer,
        system_prompt=selectors.conversation_preamble(conversation),
        history=selectors.conversation_history(leaf=answer.parent),
    )


def _ask(
    conversation: Conversation,
    parent: Message | None,
    content: str,
    earlier: list[Message] | None = None,
    *,
    new: bool = False,
) -> Turn:
    if not conversation.title:
        conversation.title = _title_from(content)
        conversation.save(update_fields=["title"])
    user_message = Message.objects.create(
        conversation=conversation, parent=parent, role=Message.Role.USER, content=content
    )
    return _answer(conversation, user_message, earlier, new=new)


@transaction.atomic
def chat_turn_start(
    *, user: AbstractBaseUser, conversation_id: int | None, content: str, parent_id: int | None = None
) -> Turn:
    """Store the user's message and an empty assistant message marked generating.

    The message follows `parent_id` when given (a message of the same conversation),
    otherwise the version the conversation shows.
    """
    # On the path of every answer's first token: as few queries as it takes.
    if conversation_id is None:
        if parent_id is not None:
            raise not_found("message")  # a new conversation has no messages to follow
        conversation = Conversation.objects.create(
            owner=user, system_prompt=settings.CHAT_SYSTEM_PROMPT, title=_title_from(content)
        )
        return _ask(conversation, None, content, earlier=[], new=True)
    conversation = selectors.conversation_get(user=user, conversation_id=conversation_id)
    if conversation is None:
        raise not_found("conversation")
    messages = {m.pk: m for m in conversation.messages.all()}
    parent_key = conversation.current_leaf_id if parent_id is None else parent_id
    parent = messages.get(parent_key) if parent_key is not None else None
    if parent_id is not None and parent is None:
        raise not_found("message")
    _refuse_if_busy(conversation, messages.values())
    earlier = [] if parent is None else selectors.message_path(message=parent, messages=messages)
    return _ask(conversation, parent, content, earlier)


MESSAGES_LIMIT = 200


@transaction.atomic
def chat_turn_from_messages(*, user: AbstractBaseUser, messages: object, settings_data: dict) -> Turn:
    """A new conversation from a whole message list (the OpenAI-style body of `POST /chat/stream`):
    its system messages as the system prompt, the others stored as history, the last (a user
    message) answered. `settings_data`: temperature and max_tokens, checked as settings are."""
    if not isinstance(messages, list) or not messages or len(messages) > MESSAGES_LIMIT:
        raise Refusal("invalid_field", f"'messages' must be a list of 1 to {MESSAGES_LIMIT} messages")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise Refusal("invalid_field", f"messages[{index}] needs a role of system, user or assistant")
        content = message.get("content")
        if not isinstance(content, str) or len(content) > settings.CHAT_MAX_CONTENT_CHARS:
            raise Refusal(
                "invalid_field",
                f"messages[{index}].content must be a string of at most "
                f"{settings.CHAT_MAX_CONTENT_CHARS} characters",
            )
        checked.append((message["role"], content))
    if checked[-1][0] != "user" or not checked[-1][1].strip():
        raise Refusal("invalid_field", "the last message must be a non-empty user message")
    system = "\n\n".join(content for role, content in checked if role == "system")
    conversation = conversation_create(
        user=user, settings_data={**settings_data, **({"system_prompt": system} if system else {})}
    )
    parent = None
    for role, content in checked[:-1]:
        if role != "system":
            parent = Message.objects.create(
                conversation=conversation, parent=parent, role=role, content=content
            )
    earlier = [] if parent is None else selectors.message_path(message=parent)
    return _ask(conversation, parent, checked[-1][1], earlier)


@transaction.atomic
def chat_turn_edit(*, user: AbstractBaseUser, message_id: int, content: str) -> Turn:
    """Send an edited copy of a user message as a new version of that turn."""
    original = _owned_message(user, message_id, Message.Role.USER)
    _refuse_if_busy(original.conversation)
    return _ask(original.conversation, original.parent, content)


@transaction.atomic
def chat_turn_regenerate(*, user: AbstractBaseUser, message_id: int) -> Turn:
    """Answer the user message that `message_id` (an answer) replied to once more, as a new version."""
    answer = _owned_message(user, message_id, Message.Role.ASSISTANT)
    _refuse_if_busy(answer.conversation)
    return _answer(answer.conversation, answer.parent)


@transaction.atomic
def chat_turn_continue(*, user: AbstractBaseUser, message_id: int) -> Turn:
    """Extend an answer that reached its length limit, in place: the same message generates again,
    from its text so far, with a fresh token budget (the engine gets the partial answer with
    `continue_final_message`, so the prefix cache serves the conversation and the answer)."""
    owned = _owned_message(user, message_id, Message.Role.ASSISTANT)
    # The conversation's row locked first (PostgreSQL): two continues at once see each other's
    # status, and only one starts generating.
    Conversation.objects.select_for_update().filter(pk=owned.conversation_id).first()
    answer = Message.objects.select_related("conversation").get(pk=owned.pk)
    if answer.status != Message.Status.COMPLETE or answer.finish_reason != "length":
        raise Refusal(
            "not_continuable",
            "only an answer cut off at its length limit can be continued",
            message=message_id,
        )
    conversation = answer.conversation
    _refuse_if_busy(conversation)
    _available_model(conversation, answer.model_name)
    # Its stored text stays as it is while it generates: the stream carries what follows.
    answer.status = Message.Status.GENERATING
    answer.finish_reason = answer.note = answer.error_code = ""
    answer.finished_at = None
    answer.save(update_fields=["status", "finish_reason", "note", "error_code", "finished_at"])
    conversation.current_leaf = answer
    conversation.save(update_fields=["current_leaf", "updated_at"])
    return _turn_of(answer)


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


@transaction.atomic
def api_exchange_store(
    *, user: AbstractBaseUser, messages: list[dict[str, str]], model_name: str, answer: dict
) -> Conversation:
    """Record one OpenAI-API exchange (`store: true`) as a conversation of its own: the system
    messages as its system prompt, the other messages as one version, then the answer, whose
    fields are message_finish's."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    turns = [m for m in messages if m["role"] != "system"]
    first_question = next((m["content"] for m in turns if m["role"] == Message.Role.USER), "")
    conversation = Conversation.objects.create(
        owner=user,
        system_prompt=system,
        title=_title_from(first_question) or "API request",
        model_name=model_name,
    )
    parent = None
    for turn in turns:
        parent = Message.objects.create(
            conversation=conversation, parent=parent, role=turn["role"], content=turn["content"]
        )
    reply = Message.objects.create(
        conversation=conversation,
        parent=parent,
        role=Message.Role.ASSISTANT,
        model_name=model_name,
        finished_at=timezone.now(),
        **answer,
    )
    conversation.current_leaf = reply
    conversation.save(update_fields=["current_leaf", "updated_at"])
    return conversation


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


def messages_interrupt_stale() -> int:
    """Mark as interrupted every answer still 'generating' that no process has owned for
    CHAT_STALE_AFTER_SECONDS, keeping the text its stream holds.

    An answer whose process died is continued by another within seconds (answers.takeover); this
    is the last resort, for one that nothing continued (no web process running, a lost registry).
    Its stored text is what its readers were shown: the text before its stream (a continued
    answer's), and the token frames of its stream."""
    seconds = settings.CHAT_STALE_AFTER_SECONDS
    cutoff, stale = timezone.now() - timedelta(seconds=seconds), time.time() - seconds
    candidates = list(
        Message.objects.filter(status=Message.Status.GENERATING, created_at__lt=cutoff).values_list(
            "pk", flat=True
        )
    )
    if not candidates:
        return 0
    r = redisconn.sync_client()
    beats = r.zmscore(keys.CHAT_ANSWERS, [str(pk) for pk in candidates])
    dead = [pk for pk, beat in zip(candidates, beats, strict=True) if beat is None or beat < stale]
    interrupted = 0
    for pk in dead:
        frames = [orjson.loads(fields[b"frame"]) for _, fields in r.xrange(keys.chat_stream(pk))[1:]]
        interrupted += Message.objects.filter(pk=pk, status=Message.Status.GENERATING).update(
            content=Concat(F("content"), Value(protocol.text_of(frames))),
            status=Message.Status.INTERRUPTED,
            error_code="interrupted",
            note="The web process generating this answer stopped before it finished.",
            finished_at=timezone.now(),
        )
    return interrupted
