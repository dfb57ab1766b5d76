"""Reads: the collections a user may read or change, and their documents' progress."""

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet, Sum

from knowledge.models import Collection, Document


def collections_readable(user: AbstractBaseUser) -> QuerySet[Collection]:
    """A user's own collections, those shared with a group of theirs, and those open to the site."""
    if not user.is_authenticated:
        return Collection.objects.none()
    return Collection.objects.filter(
        Q(owner=user)
        | Q(visibility=Collection.Visibility.SITE)
        | Q(visibility=Collection.Visibility.GROUPS, groups__in=user.groups.all())
    ).distinct()


def collection_ids_readable(user: AbstractBaseUser, wanted: list[int]) -> list[int]:
    """Those of `wanted` the user may read, in the order asked."""
    allowed = set(collections_readable(user).filter(pk__in=wanted).values_list("pk", flat=True))
    return [pk for pk in wanted if pk in allowed]


def collection_progress(collection: Collection) -> dict:
    """Documents by status and chunks embedded of those known: what a progress bar shows."""
    counts = dict(
        collection.documents.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    chunks = collection.documents.aggregate(total=Sum("chunks_total"), done=Sum("chunks_done"))
    return {
        "documents": sum(counts.values()),
        "by_status": {status: counts.get(status, 0) for status in Document.Status.values},
        "chunks_total": chunks["total"] or 0,
        "chunks_done": chunks["done"] or 0,
    }


def storage_used(user: AbstractBaseUser) -> tuple[int, int]:
    """(documents, bytes) across the collections the user owns."""
    used = Document.objects.filter(collection__owner=user).aggregate(n=Count("id"), size=Sum("size"))
    return used["n"], used["size"] or 0
