"""Windows of chunks (knowledge.chunking.windows) and, where the chunks have pgvector's `vector` column,
the same column and HNSW index on windows."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'knowledge_chunk' AND column_name = 'vector'"
        )
        if cursor.fetchone():
            cursor.execute(
                f"ALTER TABLE knowledge_window ADD COLUMN vector vector({settings.EMBEDDING_DIMENSIONS})"
            )
            cursor.execute(
                "CREATE INDEX knowledge_window_hnsw ON knowledge_window USING hnsw (vector vector_ip_ops)"
            )


def _reverse(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS knowledge_window_hnsw")
            cursor.execute("ALTER TABLE knowledge_window DROP COLUMN IF EXISTS vector")


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0003_quotes"),
    ]

    operations = [
        migrations.CreateModel(
            name="Window",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("position", models.PositiveIntegerField()),
                ("embedding", models.BinaryField()),
                (
                    "chunk",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="windows",
                        to="knowledge.chunk",
                    ),
                ),
                (
                    "collection",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="knowledge.collection",
                    ),
                ),
            ],
            options={
                "ordering": ["chunk_id", "position"],
                "indexes": [
                    models.Index(fields=["collection", "chunk"], name="knowledge_w_collect_662e71_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("chunk", "position"), name="knowledge_window_once")
                ],
            },
        ),
        migrations.RunPython(_forward, _reverse),
    ]
