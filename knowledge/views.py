"""`/collections/`: the page where people make collections, upload to them, watch them being indexed
and share them (staff). It calls the collections API (knowledge.api) with the session."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from documents.uploads import SUFFIXES
from knowledge import protocol, selectors, services


# The page's script sends the CSRF cookie's token with each change.
@ensure_csrf_cookie
@login_required
def collections_page(request: HttpRequest) -> HttpResponse:
    user = request.user
    sharer = services.may_share(user)
    initial = {
        "collections": selectors.collection_summaries(user),
        "username": user.get_username(),
        "may_share": sharer,
        # Staff (and those given the permission) share with any group; others keep theirs private.
        "groups": list(Group.objects.order_by("name").values_list("name", flat=True)) if sharer else [],
        "max_upload_bytes": settings.BULK_MAX_UPLOAD_BYTES,
        "accept": ",".join(sorted(SUFFIXES)),
        "documents_page": protocol.DOCUMENTS_PAGE,
        "documents_page_max": protocol.DOCUMENTS_PAGE_MAX,
    }
    return render(request, "knowledge/collections.html", {"initial": initial})
