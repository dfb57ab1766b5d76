"""The read-only conversation store API (docs/store.md).

Authenticated by session or `Authorization: Bearer TOKEN` with the `store.read`
scope. Users see their own conversations; staff see everyone's and may filter by user.
"""

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from apitokens.auth import user_for_request
from apitokens.models import Scope
from frontend import selectors
from frontend.http_json import ApiError, json_errors, not_found, unauthenticated
from frontend.models import Conversation

MAX_PAGE_SIZE = 100


def _user(request: HttpRequest):
    user = user_for_request(request, Scope.STORE_READ)
    if user is None:
        raise unauthenticated()
    return user


def _positive_int(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ApiError(400, "invalid_parameter", f"'{name}' must be a positive integer")
    return int(raw)


def _since(request: HttpRequest):
    raw = request.GET.get("since")
    if not raw:
        return None
    try:
        return selectors.since_from(raw)
    except ValueError:
        raise ApiError(400, "invalid_parameter", "'since' must be an ISO 8601 date or date-time") from None


def _page_url(request: HttpRequest, page: int) -> str:
    query = request.GET.copy()
    query["page"] = str(page)
    return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")


@require_GET
@json_errors
def conversation_list(request: HttpRequest) -> JsonResponse:
    """Conversations, newest activity first, one page at a time; filters: search, since, user (staff)."""
    user = _user(request)
    username = request.GET.get("user") or None
    if username and not user.is_staff and username != user.get_username():
        raise ApiError(403, "forbidden", "only staff may read other users' conversations")
    page = _positive_int(request, "page", 1)
    size = min(_positive_int(request, "page_size", settings.CHAT_API_PAGE_SIZE), MAX_PAGE_SIZE)
    conversations = selectors.conversation_list(
        user=user,
        search=request.GET.get("search", "").strip(),
        since=_since(request),
        owner_username=username,
        all_users=user.is_staff,
    ).select_related("owner")
    count = conversations.count()
    start = (page - 1) * size
    if start >= count and page > 1:
        raise ApiError(404, "not_found", "no such page")
    return JsonResponse(
        {
            "count": count,
            "next": _page_url(request, page + 1) if start + size < count else None,
            "previous": _page_url(request, page - 1) if page > 1 else None,
            "results": [selectors.conversation_summary(c) for c in conversations[start : start + size]],
        }
    )


@require_GET
@json_errors
def conversation_detail(request: HttpRequest, conversation_id: int) -> JsonResponse:
    """One conversation with every message of every version and its figures."""
    user = _user(request)
    conversations = Conversation.objects.select_related("owner")
    if not user.is_staff:
        conversations = conversations.filter(owner=user)
    conversation = conversations.filter(pk=conversation_id).first()
    if conversation is None:
        raise not_found("conversation")
    return JsonResponse(selectors.conversation_detail(conversation))
