"""The collections API (docs/knowledge.md, "Using it: the page and the API").

Authenticated by session (writes with the CSRF token) or `Authorization: Bearer KEY` with the
`knowledge` scope. A collection the user may not read answers 404 like a missing one, on every path;
one they read but do not own answers 403 to a change (its owner and superusers change it).
"""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from apitokens.auth import TokenRefused, bearer_token, token_user
from apitokens.models import Scope
from httpkit.errors import Refusal, busy, not_found, unauthenticated
from httpkit.json import check_csrf, json_view, read_json
from httpkit.validation import checked
from inference.client import EngineError
from inference.engine import embedding_client
from knowledge import protocol, rates, search, selectors, services
from knowledge.models import Collection

BODY_BYTES = 64 * 1024


def _user(request: HttpRequest):
    """The requesting user: by key (which needs the knowledge scope), else by session; a write by
    session needs the CSRF token."""
    raw = bearer_token(request)
    if raw is None:
        if not request.user.is_authenticated:
            raise unauthenticated()
        if request.method not in ("GET", "HEAD"):
            check_csrf(request, by_token=False)
        return request.user
    try:
        return token_user(raw, Scope.KNOWLEDGE)
    except TokenRefused as refused:
        if refused.reason == "missing_scope":
            raise Refusal("forbidden", "this key lacks the 'knowledge' scope") from None
        raise unauthenticated() from None


def _readable(user, collection_id: int) -> Collection:
    collection = selectors.collection_readable_get(user, collection_id)
    if collection is None:
        raise not_found("collection")
    return collection


def _changeable(user, collection_id: int) -> Collection:
    collection = _readable(user, collection_id)
    if not selectors.may_change(user, collection):
        raise Refusal("forbidden", "only the collection's owner changes it")
    return collection


def _groups(visibility: str, names: list[str]) -> list[Group]:
    if visibility != Collection.Visibility.GROUPS:
        if names:
            raise Refusal("invalid_field", "'groups' are read only with visibility 'groups'", param="groups")
        return []
    found = {group.name: group for group in Group.objects.filter(name__in=names)}
    missing = sorted(set(names) - found.keys())
    if missing or not names:
        detail = f"no group named {missing[0]!r}" if missing else "name at least one group"
        raise Refusal("invalid_field", detail, param="groups")
    return list(found.values())


def _summary(user, collection_id: int) -> dict:
    return selectors.collection_summaries(user, collection_id)[0]


@csrf_exempt
@json_view("GET", "POST")
def collections(request: HttpRequest) -> HttpResponse:
    """GET: the collections the user may read. POST: a new collection of theirs."""
    user = _user(request)
    if request.method == "GET":
        return JsonResponse({"collections": selectors.collection_summaries(user)})
    fields = checked(protocol.CollectionCreate, read_json(request, max_bytes=BODY_BYTES))
    collection = services.collection_create(
        owner=user,
        name=fields.name,
        description=fields.description,
        visibility=fields.visibility,
        groups=_groups(fields.visibility, fields.groups),
    )
    return JsonResponse(_summary(user, collection.pk), status=201)


@csrf_exempt
@json_view("GET", "PATCH", "DELETE")
def collection(request: HttpRequest, collection_id: int) -> HttpResponse:
    """GET: one collection. PATCH: its name, description, visibility and groups. DELETE: it, whole."""
    user = _user(request)
    if request.method == "GET":
        return JsonResponse(_summary(user, _readable(user, collection_id).pk))
    target = _changeable(user, collection_id)
    if request.method == "DELETE":
        services.collection_delete(collection=target)
        return HttpResponse(status=204)
    fields = checked(protocol.CollectionChange, read_json(request, max_bytes=BODY_BYTES))
    with transaction.atomic():
        if fields.name is not None or fields.description is not None:
            services.collection_update(collection=target, name=fields.name, description=fields.description)
        if fields.visibility is not None or fields.groups is not None:
            visibility = fields.visibility or target.visibility
            groups = _groups(visibility, fields.groups or [])
            services.collection_share(collection=target, by=user, visibility=visibility, groups=groups)
    return JsonResponse(_summary(user, target.pk))


@csrf_exempt
@json_view("GET", "POST")
def documents(request: HttpRequest, collection_id: int) -> HttpResponse:
    """GET: the collection's documents and their progress. POST: multipart `files` (zips too)."""
    user = _user(request)
    if request.method == "GET":
        collection = _readable(user, collection_id)
        page = checked(protocol.DocumentPage, request.GET.dict())
        return JsonResponse(selectors.document_page(collection, after=page.after, limit=page.limit))
    target = _changeable(user, collection_id)
    # Refused before the body is parsed, as the jobs API does.
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > settings.BULK_MAX_UPLOAD_BYTES:
        raise Refusal("too_large", f"The upload is larger than {settings.BULK_MAX_UPLOAD_BYTES} bytes.")
    rates.upload_check(user_id=user.pk)
    files = request.FILES.getlist("files")
    if not files:
        raise Refusal("invalid_field", "send the documents as multipart 'files'", param="files")
    result = services.documents_add(collection=target, uploads=files)
    added = {document.pk for document in result["added"]}
    return JsonResponse(
        {
            "added": selectors.document_summaries(target, ids=added),
            "duplicates": result["duplicates"],
            "failed": [{"name": name, "error": error} for name, error in result["failed"]],
        }
    )


@csrf_exempt
@json_view("DELETE")
def document(request: HttpRequest, collection_id: int, document_id: int) -> HttpResponse:
    """The document, with its passages."""
    target = _changeable(_user(request), collection_id)
    found = target.documents.filter(pk=document_id).first()
    if found is None:
        raise not_found("document")
    services.document_delete(document=found)
    return HttpResponse(status=204)


@csrf_exempt
@json_view("POST")
def collection_search(request: HttpRequest) -> HttpResponse:
    """The passages of the named collections that answer a query, best first."""
    user = _user(request)
    asked = checked(protocol.Search, read_json(request, max_bytes=BODY_BYTES))
    query = asked.query.strip()
    if not query:
        raise Refusal("invalid_field", "'query': say what to search for", param="query")
    selectors.collection_ids_checked(user, asked.collections)
    rates.search_check(user_id=user.pk)
    vector: list[float] = []
    if asked.mode != "text":
        try:
            vector = embedding_client().embed([query], priority="query")[0]
        except EngineError as exc:
            if exc.code == "busy":
                raise busy("embeddings", exc.extra.get("retry_after", 1.0)) from None
            raise Refusal("engine_unavailable", "the embedding engine is not answering") from None
    found = search.passages(
        question=query,
        query_vector=vector,
        collection_ids=list(dict.fromkeys(asked.collections)),
        top_k=asked.top_k,
        mode=asked.mode,
    )
    return JsonResponse({"passages": [passage.as_dict() for passage in found]})
