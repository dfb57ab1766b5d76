"""Uploads read as documents, for bulk jobs and collections: .txt, .md, .html, .pdf, .zip of those, and
.jsonl/.csv with id and text.

Limits are checked before content is read into memory: a file's declared size, a
zip's member count and uncompressed sizes from its directory, and every read is
bounded again in case a header lies. A problem with the whole upload raises
`UploadRejected`; a problem with one document (empty, binary, unsupported) becomes
that document's error and the others go on. HTML and PDF files are kept as bytes and
read by the worker in a bounded child process (documents/), never in the web process."""

import csv
import io
import json
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from django.conf import settings
from django.core.files import File

from documents import FORMATS
from documents.reader import file_limit
from documents.text import DocumentError, clean, decode_text

SUFFIXES = set(FORMATS) | {".zip", ".jsonl", ".csv"}
ID_COLUMNS = ("id", "custom_id")
TEXT_COLUMNS = ("text", "content", "body")


class UploadRejected(Exception):
    """The upload as a whole is refused; the message says why and is shown to the submitter."""


@dataclass(frozen=True)
class DocumentInput:
    external_id: str
    text: str = ""
    # A file read later in a bounded child process (documents.reader): its bytes and format.
    source: bytes | None = None
    format: str = "text"
    error: str = ""


@dataclass(frozen=True)
class Limits:
    upload_bytes: int
    file_bytes: int
    documents: int
    uncompressed_bytes: int

    @classmethod
    def from_settings(cls) -> "Limits":
        return cls(
            upload_bytes=settings.BULK_MAX_UPLOAD_BYTES,
            file_bytes=file_limit(),
            documents=settings.BULK_MAX_DOCUMENTS,
            uncompressed_bytes=settings.BULK_MAX_UNCOMPRESSED_BYTES,
        )


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def _read_bounded(stream, limit: int, what: str) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise UploadRejected(f"{what} is larger than the {_mib(limit)} limit.")
    return data


def _document(name: str, data: bytes) -> DocumentInput:
    suffix = PurePosixPath(name).suffix.lower()
    format = FORMATS.get(suffix)
    try:
        if format == "text":
            return DocumentInput(name, text=decode_text(data))
        if format is None:
            raise DocumentError(f"Unsupported file type {suffix or '(none)'!r} inside the archive.")
        if format == "pdf" and not data.lstrip().startswith(b"%PDF-"):
            raise DocumentError("The file is not a PDF.")
        return DocumentInput(name, source=data, format=format)
    except DocumentError as exc:
        return DocumentInput(name, error=str(exc))


def _open_zip(upload: File) -> zipfile.ZipFile:
    upload.seek(0)
    try:
        return zipfile.ZipFile(upload)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UploadRejected(f"{upload.name}: not a readable zip archive ({exc}).") from None


def _members(archive: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    return [
        m
        for m in archive.infolist()
        if not m.is_dir() and not PurePosixPath(m.filename).name.startswith(".")
        and not m.filename.startswith("__MACOSX/")
    ]  # fmt: skip


def _declared_size(upload: File) -> int:
    """What the file expands to, as far as it says before anything is read: a zip's
    directory, or the file's own size."""
    if PurePosixPath(upload.name or "").suffix.lower() != ".zip":
        return upload.size or 0
    with _open_zip(upload) as archive:
        return sum(m.file_size for m in _members(archive))


def _zip_documents(upload: File, limits: Limits) -> Iterator[DocumentInput]:
    with _open_zip(upload) as archive:
        members = _members(archive)
        if len(members) > limits.documents:
            raise UploadRejected(
                f"{upload.name} has {len(members)} files; at most {limits.documents} allowed."
            )
        declared = sum(m.file_size for m in members)
        if declared > limits.uncompressed_bytes:
            allowed = _mib(limits.uncompressed_bytes)
            raise UploadRejected(f"{upload.name} expands to {_mib(declared)}; at most {allowed} allowed.")
        for member in members:
            name = member.filename
            if PurePosixPath(name).suffix.lower() in {".zip", ".jsonl", ".csv"}:
                yield DocumentInput(name, error="Archives and tables inside an archive are not supported.")
                continue
            if member.file_size > limits.file_bytes:
                yield DocumentInput(name, error=f"Larger than the {_mib(limits.file_bytes)} file limit.")
                continue
            try:
                with archive.open(member) as stream:
                    data = _read_bounded(stream, limits.file_bytes, name)
            except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError) as exc:
                yield DocumentInput(name, error=f"Could not be extracted: {exc}")
                continue
            except UploadRejected as exc:
                yield DocumentInput(name, error=str(exc))
                continue
            yield _document(name, data)


def _text_lines(upload: File) -> io.TextIOWrapper:
    upload.seek(0)
    return io.TextIOWrapper(upload, encoding="utf-8-sig", errors="replace", newline="")


def _record(name: str, where: str, record_id, text) -> DocumentInput:
    if record_id is None or str(record_id).strip() == "":
        raise UploadRejected(f"{name}, {where}: the id is missing.")
    if not isinstance(text, str):
        raise UploadRejected(f"{name}, {where}: the text is missing or not a string.")
    record_id = str(record_id).strip()
    try:
        return DocumentInput(record_id, text=clean(text))
    except DocumentError as exc:
        return DocumentInput(record_id, error=str(exc))


def _first(mapping: dict, keys: tuple[str, ...]):
    return next((mapping[k] for k in keys if k in mapping), None)


def _jsonl_documents(upload: File) -> Iterator[DocumentInput]:
    for number, line in enumerate(_text_lines(upload), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UploadRejected(
                f"{upload.name}, line {number}: not JSON (invalid JSON: {exc.msg})."
            ) from None
        except RecursionError:
            raise UploadRejected(f"{upload.name}, line {number}: not JSON (nested too deeply).") from None
        if not isinstance(record, dict):
            raise UploadRejected(f"{upload.name}, line {number}: expected an object with id and text.")
        yield _record(upload.name, f"line {number}", _first(record, ID_COLUMNS), _first(record, TEXT_COLUMNS))


def _csv_documents(upload: File, limits: Limits) -> Iterator[DocumentInput]:
    csv.field_size_limit(limits.file_bytes)
    reader = csv.DictReader(_text_lines(upload))
    columns = set(reader.fieldnames or [])
    id_column = next((c for c in ID_COLUMNS if c in columns), None)
    text_column = next((c for c in TEXT_COLUMNS if c in columns), None)
    if id_column is None or text_column is None:
        raise UploadRejected(f"{upload.name}: needs an id column and a text column, found {sorted(columns)}.")
    try:
        for row in reader:
            yield _record(upload.name, f"row {reader.line_num}", row.get(id_column), row.get(text_column))
    except csv.Error as exc:
        raise UploadRejected(f"{upload.name}, row {reader.line_num}: {exc}") from None


def _check_file(upload: File, limits: Limits) -> None:
    """What one file's name and size say; its name becomes its base name."""
    name = PurePosixPath(upload.name or "").name or "upload"
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise UploadRejected(f"{name}: unsupported file type; use {', '.join(sorted(SUFFIXES))}.")
    if upload.size is not None and upload.size > limits.file_bytes and suffix != ".zip":
        raise UploadRejected(f"{name} is larger than the {_mib(limits.file_bytes)} file limit.")
    upload.name = name


def _file_documents(upload: File, limits: Limits) -> Iterator[DocumentInput]:
    name = upload.name
    suffix = PurePosixPath(name).suffix.lower()
    if suffix == ".zip":
        yield from _zip_documents(upload, limits)
    elif suffix == ".jsonl":
        yield from _jsonl_documents(upload)
    elif suffix == ".csv":
        yield from _csv_documents(upload, limits)
    else:
        upload.seek(0)
        yield _document(name, _read_bounded(upload, limits.file_bytes, name))


def documents_from_files(uploads: Iterable[File], limits: Limits | None = None) -> Iterator[DocumentInput]:
    """Every document in `uploads`, read one at a time as the caller stores them, so an upload's
    expansion is never held whole. What can be told from sizes and zip directories is refused here
    (UploadRejected); the rest (the expansion as read, the count, repeated ids) while iterating, so
    the caller stores inside a transaction that the refusal rolls back."""
    limits = limits or Limits.from_settings()
    uploads = list(uploads)
    if not uploads:
        raise UploadRejected("No files were uploaded.")
    for upload in uploads:
        _check_file(upload, limits)
    total = sum(u.size or 0 for u in uploads)
    if total > limits.upload_bytes:
        raise UploadRejected(f"The upload is {_mib(total)}; at most {_mib(limits.upload_bytes)} allowed.")
    # The whole upload's expansion, not each archive's: many small archives must not add up
    # to what one may not be. Checked from the directories first, then again as read.
    allowed = limits.uncompressed_bytes
    declared = sum(_declared_size(u) for u in uploads)
    if declared > allowed:
        raise UploadRejected(f"The upload expands to {_mib(declared)}; at most {_mib(allowed)} allowed.")
    return _checked(uploads, limits)


def _checked(uploads: list[File], limits: Limits) -> Iterator[DocumentInput]:
    seen: set[str] = set()
    expanded = 0
    for upload in uploads:
        for document in _file_documents(upload, limits):
            expanded += len(document.text) + len(document.source or b"")
            if expanded > limits.uncompressed_bytes:
                raise UploadRejected(f"The upload expands to more than {_mib(limits.uncompressed_bytes)}.")
            if len(seen) >= limits.documents:
                raise UploadRejected(f"More than {limits.documents} documents in one job.")
            _refuse_repeated(document, seen)
            yield document


def _refuse_repeated(document: DocumentInput, seen: set[str]) -> None:
    if document.external_id in seen:
        raise UploadRejected(f"The id {document.external_id!r} appears more than once.")
    seen.add(document.external_id)


def documents_from_records(records: object, limits: Limits | None = None) -> list[DocumentInput]:
    """Documents from a parsed JSON list of {"id", "text"} objects (the API's JSON body)."""
    limits = limits or Limits.from_settings()
    if not isinstance(records, list) or not records:
        raise UploadRejected("documents must be a non-empty list of objects with id and text.")
    if len(records) > limits.documents:
        raise UploadRejected(f"More than {limits.documents} documents in one job.")
    documents: list[DocumentInput] = []
    seen: set[str] = set()
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise UploadRejected(f"documents[{index}]: expected an object with id and text.")
        document = _record(
            "documents", f"item {index}", _first(record, ID_COLUMNS), _first(record, TEXT_COLUMNS)
        )
        _refuse_repeated(document, seen)
        documents.append(document)
    return documents
