"""Results as files: JSONL in the OpenAI batch output shape, and CSV for spreadsheets."""

import csv
import io
import json
from collections.abc import Iterator

from jobs import selectors
from jobs.models import Job

CSV_COLUMNS = [
    "id",
    "status",
    "summary",
    "error",
    "chunks",
    "document_tokens",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
]


def jsonl_lines(*, job: Job) -> Iterator[str]:
    for line in selectors.job_result_lines(job=job):
        yield json.dumps(line, ensure_ascii=False) + "\n"


def _csv_safe(value: object) -> object:
    # A cell starting with these runs as a formula in spreadsheet programs.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def csv_lines(*, job: Job) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for document in selectors.job_documents(job=job):
        result = getattr(document, "result", None)
        row = [
            document.external_id,
            document.status,
            result.summary if result else "",
            document.error,
            result.chunks if result else "",
            result.document_tokens if result else "",
            result.prompt_tokens if result else "",
            result.cached_tokens if result else "",
            result.completion_tokens if result else "",
        ]
        writer.writerow([_csv_safe(v) for v in row])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
