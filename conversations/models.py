"""The conversation store: conversations owned by users, and their messages.

Messages form a tree: each points at the message it follows (`parent`). Editing a
user message or regenerating an answer adds a sibling, so versions of a turn share
their common history (and the engine's prefix cache serves it). The conversation
remembers which leaf is shown; the path from the root to it is the prompt history.
A message row is written when it starts and when it ends, never per token.
docs/store.md describes the schema."""

from django.conf import settings
from django.db import models

from answers.status import AnswerStatus


class Conversation(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    system_prompt = models.TextField(blank=True)
    # Null means the deployment's default (CHAT_TEMPERATURE, CHAT_MAX_TOKENS).
    temperature = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    # The engine may not end an answer before this many tokens (vLLM's min_tokens); null: no floor.
    min_tokens = models.PositiveIntegerField(null=True, blank=True)
    # One of inference.engine.served_models(), chosen before the first message and kept; empty: the default.
    model_name = models.CharField(max_length=200, blank=True)
    # The last message of the version the user sees; new messages follow it.
    current_leaf = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The sidebar's organisation: pinned ones on top; archived ones out of the list, found by search.
    pinned = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]
        # Reading other users' conversations (store API, admin) needs this, not is_staff alone;
        # every such read is recorded (audit.ConversationRead).
        permissions = [("read_all_conversations", "Can read every user's conversations")]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"


class ConversationDocument(models.Model):
    """A file's text attached to a conversation: it sits in the prompt right after the system
    prompt on every turn, where the engine's prefix cache serves it (chat.documents)."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="documents")
    name = models.CharField(max_length=255)
    text = models.TextField()
    # What it adds to the prompt, counted by the engine when it was attached.
    tokens = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.name


class SharedLink(models.Model):
    """A read-only link to a snapshot of one version of a conversation, taken when it was made:
    later turns and other versions never show through it. Its owner revokes it."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="shared_links")
    token = models.CharField(max_length=64, unique=True)
    # {"title": ..., "messages": [{"role", "content"}, ...]}: the shown version's path.
    snapshot = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"share of {self.conversation_id} ({'revoked' if self.revoked_at else 'live'})"


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    # An answer's statuses belong to the answer run (answers.status), whichever surface stores it.
    Status = AnswerStatus

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    # The message this one follows; null for the first user message of each version.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    # Why the message ended as it did, or what was done to fit the context window.
    note = models.TextField(blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    finish_reason = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.role} #{self.pk} ({self.status})"


class StoredCompletion(models.Model):
    """An OpenAI-API exchange kept with `store: true`: its answer, under the id the API answered
    with, and the caller's metadata. `GET /v1/chat/completions` lists these (openai_api.stored);
    deleting the conversation, from the chat or the API, deletes it."""

    completion_id = models.CharField(max_length=64, unique=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="stored_completions"
    )
    answer = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="stored_completion")
    model_name = models.CharField(max_length=200, blank=True)
    # At most 16 pairs of strings (openai_api.protocol.Metadata).
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["owner", "id"])]

    def __str__(self) -> str:
        return self.completion_id
