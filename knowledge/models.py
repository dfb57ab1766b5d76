"""Collections, their documents, the documents' chunks with their vectors, and the chunks' windows.

A chunk's vector, and each of its windows' (knowledge.chunking.windows), is kept as little-endian float32
bytes on every database, read by the exact search (knowledge.vectors); on a PostgreSQL with pgvector
migrations add a `vector` column and an HNSW index beside them, which the approximate search reads.
Full-text search uses the database's own: FTS5 on SQLite, a GIN index over `to_tsvector` on PostgreSQL
(knowledge.migrations).
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class Collection(models.Model):
    class Visibility(models.TextChoices):
        PRIVATE = "private", "Only me"
        GROUPS = "groups", "My groups"
        SITE = "site", "Everyone on the site"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="collections")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    visibility = models.CharField(max_length=16, choices=Visibility.choices, default=Visibility.PRIVATE)
    # Read by members of these groups when visibility is GROUPS.
    groups = models.ManyToManyField(Group, blank=True, related_name="collections")
    # The conversations that retrieve from this collection on each question.
    conversations = models.ManyToManyField("frontend.Conversation", blank=True, related_name="collections")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        permissions = [("share_collection_site", "Can share a collection with groups or the whole site")]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        READING = "reading"
        READY = "ready"
        FAILED = "failed"

    class Format(models.TextChoices):
        TEXT = "text"
        HTML = "html"
        PDF = "pdf"

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="documents")
    name = models.CharField(max_length=500)
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.TEXT)
    # sha256 of the uploaded bytes: the same file in one collection is stored once.
    content_hash = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField(default=0)
    # The upload's bytes until its text is read; then the text, which a new chunker re-indexes from.
    source = models.BinaryField(null=True, blank=True, editable=False)
    text = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # Who reads it now, until when: an expired lease is taken over by another worker.
    claimed_by = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # The chunker the chunks were made with (knowledge.chunking.chunker_id); another re-indexes.
    chunker = models.CharField(max_length=100, blank=True)
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)
    tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["collection_id", "id"]
        indexes = [models.Index(fields=["status", "lease_until"])]
        constraints = [
            models.UniqueConstraint(fields=["collection", "content_hash"], name="knowledge_document_once")
        ]

    def __str__(self) -> str:
        return self.name


class Chunk(models.Model):
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    # The document's collection, kept here so a search filters chunks without a join.
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()
    text = models.TextField()
    # The 1-based page of a PDF the chunk starts on; None for other formats.
    page = models.PositiveIntegerField(null=True, blank=True)
    start = models.PositiveIntegerField(default=0)
    tokens = models.PositiveIntegerField(default=0)
    chunker = models.CharField(max_length=100)
    embedding = models.BinaryField()

    class Meta:
        ordering = ["document_id", "position"]
        constraints = [models.UniqueConstraint(fields=["document", "position"], name="knowledge_chunk_once")]
        indexes = [models.Index(fields=["collection", "id"])]

    def __str__(self) -> str:
        return f"{self.document_id}:{self.position}"


class Window(models.Model):
    """One sentence of a chunk, embedded on its own: the chunk ranks by its best window or itself."""

    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="windows")
    # The chunk's collection, kept here so a search filters windows without a join.
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()
    embedding = models.BinaryField()

    class Meta:
        ordering = ["chunk_id", "position"]
        constraints = [models.UniqueConstraint(fields=["chunk", "position"], name="knowledge_window_once")]
        indexes = [models.Index(fields=["collection", "chunk"])]

    def __str__(self) -> str:
        return f"{self.chunk_id}:{self.position}"


class Quote(models.Model):
    """A passage a user message's prompt quoted (`new`: in its own block) or cited by number (quoted by
    an earlier turn of the conversation). The prompt of any later turn is rebuilt from these, so it is
    the same bytes every time and the prefix cache serves it; a deleted document takes its quotes along."""

    message = models.ForeignKey("frontend.Message", on_delete=models.CASCADE, related_name="+")
    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="+")
    number = models.PositiveIntegerField()
    new = models.BooleanField(default=True)

    class Meta:
        ordering = ["message_id", "number"]
        constraints = [models.UniqueConstraint(fields=["message", "number"], name="knowledge_quote_once")]

    def __str__(self) -> str:
        return f"[{self.number}] of {self.message_id}"
