"""The search indexes each database gives: SQLite's FTS5 table kept by triggers; on PostgreSQL a stored
text search vector of each passage with its GIN index and, where the pgvector extension is available, a
`vector` column with an HNSW index (knowledge.vectors reads it; without it search is exact)."""

from django.conf import settings
from django.db import migrations

_DELETE = (
    "INSERT INTO knowledge_chunk_fts(knowledge_chunk_fts, rowid, text) VALUES ('delete', old.id, old.text);"
)
SQLITE = [
    "CREATE VIRTUAL TABLE knowledge_chunk_fts USING fts5("
    "text, content='knowledge_chunk', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER knowledge_chunk_fts_insert AFTER INSERT ON knowledge_chunk BEGIN "
    "INSERT INTO knowledge_chunk_fts(rowid, text) VALUES (new.id, new.text); END",
    f"CREATE TRIGGER knowledge_chunk_fts_delete AFTER DELETE ON knowledge_chunk BEGIN {_DELETE} END",
    "CREATE TRIGGER knowledge_chunk_fts_update AFTER UPDATE OF text ON knowledge_chunk BEGIN "
    f"{_DELETE} "
    "INSERT INTO knowledge_chunk_fts(rowid, text) VALUES (new.id, new.text); END",
]
SQLITE_REVERSE = [
    "DROP TRIGGER knowledge_chunk_fts_update",
    "DROP TRIGGER knowledge_chunk_fts_delete",
    "DROP TRIGGER knowledge_chunk_fts_insert",
    "DROP TABLE knowledge_chunk_fts",
]


def _forward(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for statement in SQLITE:
                cursor.execute(statement)
        elif connection.vendor == "postgresql":
            config = settings.KNOWLEDGE_FTS_CONFIG
            # Stored, so ranking reads each passage's vector instead of parsing its text again.
            cursor.execute(
                "ALTER TABLE knowledge_chunk ADD COLUMN search tsvector "
                f"GENERATED ALWAYS AS (to_tsvector('{config}'::regconfig, text)) STORED"
            )
            cursor.execute("CREATE INDEX knowledge_chunk_tsv ON knowledge_chunk USING gin (search)")
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cursor.fetchone():
                cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
                cursor.execute(
                    f"ALTER TABLE knowledge_chunk ADD COLUMN vector vector({settings.EMBEDDING_DIMENSIONS})"
                )
                # Vectors are unit length, so the inner product orders as cosine similarity does.
                cursor.execute(
                    "CREATE INDEX knowledge_chunk_hnsw ON knowledge_chunk USING hnsw (vector vector_ip_ops)"
                )


def _reverse(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            for statement in SQLITE_REVERSE:
                cursor.execute(statement)
        elif connection.vendor == "postgresql":
            cursor.execute("DROP INDEX IF EXISTS knowledge_chunk_tsv")
            cursor.execute("ALTER TABLE knowledge_chunk DROP COLUMN IF EXISTS search")
            cursor.execute("DROP INDEX IF EXISTS knowledge_chunk_hnsw")
            cursor.execute("ALTER TABLE knowledge_chunk DROP COLUMN IF EXISTS vector")


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]

    operations = [migrations.RunPython(_forward, _reverse)]
