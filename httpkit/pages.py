"""OpenAI's cursor pages over a query: items in creation (primary-key) order, each page starting
after the item whose public id the client names (`after`), with whether more follow."""

from django.db.models import QuerySet


def cursor_page(
    rows: QuerySet, *, visible: QuerySet, key: str, after: str | None, limit: int, descending: bool
) -> tuple[list, bool]:
    """A page of `rows` and whether more follow; `after` is looked up by `key` among `visible` (what
    the client may see, whatever the filters): LookupError when it is not there."""
    if after:
        mark = visible.filter(**{key: after}).values_list("pk", flat=True).first()
        if mark is None:
            raise LookupError(after)
        rows = rows.filter(**{"pk__lt" if descending else "pk__gt": mark})
    found = list(rows.order_by("-pk" if descending else "pk")[: limit + 1])
    return found[:limit], len(found) > limit
