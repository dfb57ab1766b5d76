"""Reads: the collections a user may read or change, their summaries and their documents' progress."""

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q, QuerySet, Sum

from httpkit.errors import Refusal
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


def collection_ids_checked(user: AbstractBaseUser, wanted: list[int]) -> list[int]:
    """`wanted`, each of which the user may read; `not_found` naming the first they may not, byte for
    byte as an id that does not exist (never dropped silently)."""
    readable = collection_ids_readable(user, wanted)
    missing = [pk for pk in wanted if pk not in readable]
    if missing:
        raise Refusal("not_found", f"no such collection: {missing[0]}", param="collections")
    return readable


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


def may_change(user: AbstractBaseUser, collection: Collection) -> bool:
    """Its owner changes a collection, and superusers who read it; those who only read it do not."""
    return collection.owner_id == user.pk or user.is_superuser


def collection_readable_get(user: AbstractBaseUser, collection_id: int) -> Collection | None:
    """The collection if the user may read it; None whether it is missing or not theirs to read."""
    return collections_readable(user).filter(pk=collection_id).select_related("owner").first()


def collection_summaries(user: AbstractBaseUser, collection_id: int | None = None) -> list[dict]:
    """The collections the user may read (or the one asked for), each with who owns it, who reads it,
    whether the user may change it, and its progress (the shape of collection_progress)."""
    readable = collections_readable(user).values("pk")
    if collection_id is not None:
        readable = readable.filter(pk=collection_id)
    statuses = {
        status: Count("documents", filter=Q(documents__status=status)) for status in Document.Status.values
    }
    collections = (
        Collection.objects.filter(pk__in=readable)
        .select_related("owner")
        .prefetch_related("groups")
        .annotate(
            **{f"n_{s}": n for s, n in statuses.items()},
            chunks_total=Sum("documents__chunks_total"),
            chunks_done=Sum("documents__chunks_done"),
        )
    )
    return [
        {
            "id": c.pk,
            "name": c.name,
            "description": c.description,
            "owner": c.owner.get_username(),
            "visibility": c.visibility,
            "groups": sorted(g.name for g in c.groups.all()),
            "created_at": c.created_at.isoformat(),
            "may_change": may_change(user, c),
            "progress": {
                "documents": sum(getattr(c, f"n_{s}") for s in statuses),
                "by_status": {s: getattr(c, f"n_{s}") for s in statuses},
                "chunks_total": c.chunks_total or 0,
                "chunks_done": c.chunks_done or 0,
            },
        }
        for c in collections
    ]


DOCUMENT_FIELDS = (
    "id", "name", "format", "status", "error", "size", "chunks_done", "chunks_total", "created_at",
    "finished_at",
)  # fmt: skip


def document_summaries(
    collection: Collection, *, after: int = 0, limit: int | None = None, ids: Iterable[int] | None = None
) -> list[dict]:
    """The collection's documents after id `after` (or those of `ids`), oldest first (at most `limit`),
    without their bytes or text."""
    rows = collection.documents.filter(pk__gt=after).order_by("id").values(*DOCUMENT_FIELDS)
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    return list(rows if limit is None else rows[:limit])


def document_page(collection: Collection, *, after: int, limit: int) -> dict:
    """One page of the collection's documents, and the `after` of the next page (None on the last)."""
    documents = document_summaries(collection, after=after, limit=limit + 1)
    more = len(documents) > limit
    return {"documents": documents[:limit], "next": documents[limit - 1]["id"] if more else None}
