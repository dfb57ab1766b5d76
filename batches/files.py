"""Files of the Batch API: stored, listed, read and deleted, each its owner's only. A file's bytes go
from the upload's temporary file (Django's upload handlers spool past FILE_UPLOAD_MAX_MEMORY_SIZE) to
BATCH_FILES_DIR a chunk at a time, and out again the same way: no file is ever held whole."""

from datetime import timedelta
from pathlib import PurePath

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files import File as DjangoFile
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from batches.models import File
from httpkit.errors import Refusal
from httpkit.pages import cursor_page


def file_store(
    *, owner: AbstractBaseUser, content: DjangoFile, filename: str, purpose: str, expires_seconds: int | None
) -> File:
    """Keep an uploaded (or written) file; `too_large` past BATCH_FILE_MAX_BYTES."""
    if content.size > settings.BATCH_FILE_MAX_BYTES:
        raise Refusal("too_large", f"A file may hold at most {settings.BATCH_FILE_MAX_BYTES} bytes.")
    name = PurePath(filename or "file").name[:200] or "file"
    now = timezone.now()
    file = File(
        owner=owner,
        purpose=purpose,
        filename=name,
        bytes=content.size,
        expires_at=now + timedelta(seconds=expires_seconds) if expires_seconds else None,
    )
    # Saved under the file's own id, a chunk at a time, never under the client's name.
    file.content.save(file.file_id, content, save=False)
    try:
        file.save()
    except BaseException:
        file.content.delete(save=False)
        raise
    return file


def _live(owner: AbstractBaseUser) -> QuerySet[File]:
    return File.objects.filter(owner=owner).filter(Q(expires_at=None) | Q(expires_at__gt=timezone.now()))


def file_get(*, owner: AbstractBaseUser, file_id: str) -> File | None:
    """The owner's file, or None: another user's, or an expired one, reads as missing."""
    return _live(owner).filter(file_id=file_id).first()


def file_list(
    *, owner: AbstractBaseUser, after: str | None, limit: int, order: str, purpose: str | None
) -> tuple[list[File], bool]:
    """A page of the owner's files and whether more follow (LookupError: `after` is not theirs)."""
    files = _live(owner)
    if purpose:
        files = files.filter(purpose=purpose)
    return cursor_page(
        files, visible=_live(owner), key="file_id", after=after, limit=limit, descending=order == "desc"
    )


def file_delete(*, file: File) -> None:
    """Delete the row, then the bytes once the deletion is committed."""
    path = file.content.name
    storage = file.content.storage
    with transaction.atomic():
        file.delete()
        transaction.on_commit(lambda: storage.delete(path))


def files_expire() -> int:
    """Delete every file whose expiry has passed; how many."""
    expired = File.objects.filter(expires_at__lte=timezone.now())
    count = 0
    for file in expired.iterator():
        file_delete(file=file)
        count += 1
    return count
