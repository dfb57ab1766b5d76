"""The read-only conversation store API (docs/store.md).

Authenticated by session or `Authorization: Bearer TOKEN` with the `store.read`
scope. Users see their own conversations. Those with the read_all_conversations permission
may ask for another user's (`?user=NAME`), everyone's (`?all=true`) or any one conversation;
each such read is recorded (audit) before it is answered. is_staff alone reads nothing more.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import HttpRequest, JsonResponse

from apitokens.auth import user_for_request
from apitokens.models import Scope
from audit.models import ConversationRead
from audit.services import conversation_read_record
from conversations import selectors
from conversations.models import Conversation
from httpkit.errors import Refusal, not_found, unauthenticated
from httpkit.json import json_view

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
        raise Refusal("invalid_field", f"'{name}' must be a positive integer")
    return int(raw)


def _since(request: HttpRequest):
    raw = request.GET.get("since")
    if not raw:
        return None
    try:
        return selectors.since_from(raw)
    except ValueError:
        raise Refusal("invalid_field", "'since' must be an ISO 8601 date or date-time") from None


def _archived(request: HttpRequest) -> bool | None:
    raw = request.GET.get("archived")
    if raw is None:
        return None
    if raw not in ("true", "false"):
        raise Refusal("invalid_field", "'archived' must be true or false")
    return raw == "true"


def _page_url(request: HttpRequest, page: int) -> str:
    query = request.GET.copy()
    query["page"] = str(page)
    return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")


@json_view("GET")
def conversation_list(request: HttpRequest) -> JsonResponse:
    """Conversations, newest activity first, one page at a time; filters: search (each result then has
    the `snippet` its messages matched with), since, archived, user (staff)."""
    user = _user(request)
    username = request.GET.get("user") or None
    everyone = request.GET.get("all") == "true"
    others = everyone or (username is not None and username != user.get_username())
    if others and not selectors.may_read_all(user):
        raise Refusal(
            "forbidden", "reading other users' conversations needs the read_all_conversations permission"
        )
    page = _positive_int(request, "page", 1)
    size = min(_positive_int(request, "page_size", settings.CHAT_API_PAGE_SIZE), MAX_PAGE_SIZE)
    search = request.GET.get("search", "").strip()
    if len(search) > selectors.SEARCH_MAX_CHARS:
        raise Refusal("invalid_field", f"'search' is at most {selectors.SEARCH_MAX_CHARS} characters")
    conversations = selectors.conversation_list(
        user=user,
        search=search,
        since=_since(request),
        owner_username=username,
        all_users=others,
        archived=_archived(request),
    ).select_related("owner")
    if others:
        owner = get_user_model().objects.filter(username=username).values_list("pk", flat=True).first()
        conversation_read_record(
            reader=user,
            owner_id=owner,
            conversation_id=None,
            through=ConversationRead.Through.STORE_LIST,
            detail=request.GET.urlencode(),
        )
    count = conversations.count()
    start = (page - 1) * size
    if start >= count and page > 1:
        raise not_found("page")
    results = [selectors.conversation_summary(c) for c in conversations[start : start + size]]
    if search:
        snippets = selectors.search_snippets([r["id"] for r in results], search)
        for result in results:
            result["snippet"] = snippets.get(result["id"], "")
    return JsonResponse(
        {
            "count": count,
            "next": _page_url(request, page + 1) if start + size < count else None,
            "previous": _page_url(request, page - 1) if page > 1 else None,
            "results": results,
        }
    )


@json_view("GET")
def conversation_detail(request: HttpRequest, conversation_id: int) -> JsonResponse:
    """One conversation with every message of every version and its figures."""
    user = _user(request)
    conversations = Conversation.objects.select_related("owner")
    if not selectors.may_read_all(user):
        conversations = conversations.filter(owner=user)
    conversation = conversations.filter(pk=conversation_id).first()
    if conversation is None:
        raise not_found("conversation")
    if conversation.owner_id != user.pk:
        conversation_read_record(
            reader=user,
            owner_id=conversation.owner_id,
            conversation_id=conversation.pk,
            through=ConversationRead.Through.STORE_DETAIL,
        )
    return JsonResponse(selectors.conversation_detail(conversation))
