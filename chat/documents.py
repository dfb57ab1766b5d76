"""Documents attached to a conversation: read as the bulk jobs read files (txt, md, html, pdf, with
their limits), counted by the engine, and kept only if they fit the context window with room for
the answer and a question. Never truncated: one that does not fit is refused with the numbers.

Nothing is parsed in the web process: every attachment's text is read in the bounded child process
(documents.reader) that this process awaits, and the file itself is read off the database's thread,
so one hostile file costs its sender a refusal and every other chat nothing. A user reads one
attachment at a time, a process a few; a text too long to fit is refused by its length before the
engine counts it.

Their text opens every turn's prompt right after the system prompt (selectors.preamble), so the
engine's prefix cache serves it from the second turn on, as `chat.done`'s cached tokens show."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import PurePosixPath

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile

import redisconn
from conversations import selectors
from conversations.models import ConversationDocument
from documents import FORMATS
from documents.reader import document_text, file_limit
from documents.text import DocumentError
from httpkit.errors import Refusal, busy, not_found
from inference.client import EngineClient, EngineError
from redisconn import keys

# Left free beside the documents and the answer, for the question of the turn.
QUESTION_ROOM = 256
# A token of the model's tokenizer spans at most this many characters (its longest merges are runs of
# spaces or symbols, under 16): a text longer than this many characters a token left of the window is
# refused by its length alone, before the engine counts anything.
MAX_CHARS_PER_TOKEN = 16
# Attachments being read now in this process (its event loop's): each is a child process of it.
_reading = 0


@asynccontextmanager
async def _reading_slot(user_id: int) -> AsyncIterator[None]:
    """Hold one of the attachments read at once: CHAT_DOCUMENT_READS_PER_PROCESS in this process,
    CHAT_DOCUMENT_READS_PER_USER for the user in all of them (counted in Redis); past either, `busy`."""
    global _reading
    retry = settings.CHAT_BUSY_RETRY_AFTER
    if _reading >= settings.CHAT_DOCUMENT_READS_PER_PROCESS:
        raise busy("document_reads", retry)
    r = redisconn.client()
    key = keys.chat_user_document_reads(user_id)
    async with r.pipeline(transaction=True) as pipe:
        pipe.incr(key)
        # A process that dies holding one gives it back when the key expires.
        pipe.expire(key, int(settings.BULK_PDF_TIMEOUT * 2) + 1)
        held, _ = await pipe.execute()
    if held > settings.CHAT_DOCUMENT_READS_PER_USER:
        await r.decr(key)
        raise busy("user_document_reads", retry)
    _reading += 1
    try:
        yield
    finally:
        _reading -= 1
        await r.decr(key)


def _read(upload: UploadedFile) -> tuple[str, bytes, str]:
    """(name, bytes, format) of an attachment within the file limit, or Refusal. Nothing is parsed here."""
    name = PurePosixPath(upload.name or "document").name
    format = FORMATS.get(PurePosixPath(name).suffix.lower())
    if format is None:
        raise Refusal("invalid_field", f"{name}: attach a file of one of the types {', '.join(FORMATS)}")
    limit = file_limit()
    upload.seek(0)
    data = upload.read(limit + 1)
    if len(data) > limit:
        raise Refusal("too_large", f"{name} is larger than the {limit / (1024 * 1024):.1f} MiB file limit.")
    return name, data, format


async def document_attach(
    *, user: AbstractBaseUser, conversation_id: int, upload: UploadedFile, engine: EngineClient
) -> ConversationDocument:
    """Attach a file's text to one of the user's conversations, if it fits."""
    conversation = await sync_to_async(selectors.conversation_get)(user=user, conversation_id=conversation_id)
    if conversation is None:
        raise not_found("conversation")
    # Off the database's thread: every chat of this process waits on that one.
    name, data, format = await sync_to_async(_read, thread_sensitive=False)(upload)
    try:
        async with _reading_slot(user.pk):
            text = await document_text(data, format)
    except DocumentError as exc:
        raise Refusal("invalid_field", f"{name}: {exc}") from None
    answer = conversation.max_tokens or settings.CHAT_MAX_TOKENS
    window = settings.INFERENCE_MAX_MODEL_LEN
    most = window - answer - QUESTION_ROOM
    if len(text) > max(most, 0) * MAX_CHARS_PER_TOKEN:
        raise Refusal(
            "too_large",
            f"{name} is {len(text):,} characters: more than the {max(most, 0):,} tokens that fit in the "
            f"model's {window:,}-token context window beside a {answer:,}-token answer and {QUESTION_ROOM} "
            "for the question could hold. Nothing was cut: attach a shorter document.",
        )
    attached = await sync_to_async(lambda: list(conversation.documents.values_list("name", "text")))()
    before = selectors.preamble(conversation.system_prompt, attached)
    after = selectors.preamble(conversation.system_prompt, [*attached, (name, text)])
    try:
        tokens_before = (
            await engine.count_prompt_tokens([{"role": "system", "content": before}]) if before else 0
        )
        tokens_after = await engine.count_prompt_tokens([{"role": "system", "content": after}])
    except EngineError as exc:
        raise Refusal("engine_unavailable", f"The document could not be counted: {exc.detail}") from None
    room = most - tokens_before
    added = tokens_after - tokens_before
    if added > room:
        raise Refusal(
            "too_large",
            f"{name} is {added:,} tokens; beside what the conversation holds ({tokens_before:,}), a "
            f"{answer:,}-token answer and {QUESTION_ROOM} for the question, {max(room, 0):,} fit in the "
            f"model's {window:,}-token context window. Nothing was cut: attach a shorter document.",
        )
    return await ConversationDocument.objects.acreate(
        conversation=conversation, name=name[:255], text=text, tokens=added
    )
