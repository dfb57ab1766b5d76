"""What a user changes: collections, who may read them, their documents.

A document is stored once per collection (by its bytes' sha256); its text is read, chunked and
embedded on the bulk queue (knowledge.tasks), queued when the upload's transaction commits.
"""

import hashlib
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.files import File
from django.db import transaction

from documents.uploads import Limits, UploadRejected, documents_from_files
from httpkit.errors import Refusal
from knowledge.models import Collection, Document
from knowledge.selectors import storage_used
from knowledge.tasks import collection_index

NAME_MAX = 200
DESCRIPTION_MAX = 2000


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > NAME_MAX:
        raise Refusal("invalid_field", f"A collection's name is 1 to {NAME_MAX} characters.")
    return name


def may_share(user: AbstractBaseUser) -> bool:
    """Whether `user` shares collections with groups or the site: staff, or a user an admin gave the
    permission to (alone or through a group)."""
    return user.is_staff or user.has_perm("knowledge.share_collection_site")


def _check_visibility(user: AbstractBaseUser, visibility: str) -> str:
    if visibility not in Collection.Visibility.values:
        raise Refusal("invalid_field", f"visibility is one of {', '.join(Collection.Visibility.values)}.")
    if visibility != Collection.Visibility.PRIVATE and not may_share(user):
        raise Refusal("forbidden", "Only staff share a collection with groups or the whole site.")
    return visibility


def collection_create(
    *, owner: AbstractBaseUser, name: str, description: str = "", visibility: str = "private",
    groups: Iterable[Group] = (),
) -> Collection:  # fmt: skip
    collection = Collection.objects.create(
        owner=owner,
        name=_check_name(name),
        description=(description or "")[:DESCRIPTION_MAX],
        visibility=_check_visibility(owner, visibility),
    )
    collection.groups.set(groups)
    return collection


def collection_update(
    *, collection: Collection, name: str | None = None, description: str | None = None
) -> None:
    """A new name or description."""
    if name is not None:
        collection.name = _check_name(name)
    if description is not None:
        collection.description = description[:DESCRIPTION_MAX]
    collection.save(update_fields=["name", "description"])


def collection_share(
    *, collection: Collection, by: AbstractBaseUser, visibility: str, groups: Iterable[Group] = ()
) -> Collection:
    """Who may read the collection: its owner only, members of `groups`, or everyone (staff decide)."""
    collection.visibility = _check_visibility(by, visibility)
    collection.save(update_fields=["visibility"])
    collection.groups.set(groups if visibility == Collection.Visibility.GROUPS else [])
    return collection


def collection_delete(*, collection: Collection) -> None:
    """The collection with its documents, chunks and vectors."""
    collection.delete()


def upload_limits() -> Limits:
    return Limits(
        upload_bytes=settings.BULK_MAX_UPLOAD_BYTES,
        file_bytes=settings.BULK_MAX_FILE_BYTES,
        documents=settings.BULK_MAX_DOCUMENTS,
        uncompressed_bytes=settings.BULK_MAX_UNCOMPRESSED_BYTES,
    )


def documents_add(*, collection: Collection, uploads: Iterable[File]) -> dict:
    """Store the documents of an upload (files, zips) in the collection and queue their reading.

    Returns {"added": [...], "duplicates": [...], "failed": [(name, why)]}. The user's quota
    (KNOWLEDGE_MAX_DOCUMENTS_PER_USER, KNOWLEDGE_MAX_BYTES_PER_USER) refuses the whole upload with
    `quota_exceeded`; nothing of a refused upload is stored."""
    owner = collection.owner
    added: list[Document] = []
    duplicates: list[str] = []
    failed: list[tuple[str, str]] = []
    try:
        with transaction.atomic():
            count, size = storage_used(owner)
            known = set(collection.documents.values_list("content_hash", flat=True))
            for item in documents_from_files(uploads, upload_limits()):
                if item.error:
                    failed.append((item.external_id, item.error))
                    continue
                data = item.source if item.source is not None else item.text.encode()
                digest = hashlib.sha256(data).hexdigest()
                if digest in known:
                    duplicates.append(item.external_id)
                    continue
                count, size = count + 1, size + len(data)
                _check_quota(count, size)
                known.add(digest)
                added.append(
                    Document.objects.create(
                        collection=collection,
                        name=item.external_id[:500],
                        format=item.format,
                        content_hash=digest,
                        size=len(data),
                        source=item.source,
                        text=item.text,
                    )
                )
            if added:
                transaction.on_commit(lambda: _queue(collection.pk))
    except UploadRejected as exc:
        raise Refusal("invalid_field", str(exc)) from None
    return {"added": added, "duplicates": duplicates, "failed": failed}


def _check_quota(count: int, size: int) -> None:
    if count > settings.KNOWLEDGE_MAX_DOCUMENTS_PER_USER:
        raise Refusal(
            "quota_exceeded",
            f"Your collections may hold at most {settings.KNOWLEDGE_MAX_DOCUMENTS_PER_USER} documents.",
        )
    if size > settings.KNOWLEDGE_MAX_BYTES_PER_USER:
        mib = settings.KNOWLEDGE_MAX_BYTES_PER_USER / (1024 * 1024)
        raise Refusal("quota_exceeded", f"Your collections may hold at most {mib:.0f} MiB.")


def _queue(collection_id: int) -> None:
    collection_index.delay(collection_id)


def document_delete(*, document: Document) -> None:
    """The document with its chunks and vectors."""
    document.delete()
