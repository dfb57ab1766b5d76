"""The chat page, and the small JSON actions its sidebar and settings dialog call.

The actions are for the logged-in browser (session and CSRF token); the API for
programs is conversations.api (store) and chat.http_stream (chat).
"""

import json

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from chat import documents, protocol, rates
from conversations import selectors, services
from httpkit.errors import Refusal, not_found
from httpkit.json import check_csrf, json_view, read_json
from httpkit.validation import TEMPERATURE_BOUNDS, checked
from inference.access import models_for
from inference.engine import engine_client
from knowledge import quotes
from knowledge.protocol import ConversationCollections
from knowledge.selectors import collections_readable

ACTION_BODY_BYTES = 64 * 1024
# The most conversations the chat page lists at load; search reaches the rest.
SIDEBAR_CONVERSATIONS = 200


def _bounds(user) -> dict:
    return {
        "models": models_for(user=user),
        "temperature": {"min": TEMPERATURE_BOUNDS[0], "max": TEMPERATURE_BOUNDS[1]},
        "max_tokens": {"min": 1, "max": settings.CHAT_MAX_TOKENS_LIMIT},
        "min_tokens": {"min": 0, "max": settings.CHAT_MAX_TOKENS_LIMIT},
        "system_prompt_chars": settings.CHAT_SYSTEM_PROMPT_MAX_CHARS,
        "content_chars": settings.CHAT_MAX_CONTENT_CHARS,
        "defaults": {
            "system_prompt": settings.CHAT_SYSTEM_PROMPT,
            "temperature": settings.CHAT_TEMPERATURE,
            "max_tokens": settings.CHAT_MAX_TOKENS,
        },
    }


@login_required
def chat(request: HttpRequest, conversation_id: int | None = None) -> HttpResponse:
    """The chat page, optionally opened on one of the user's conversations."""
    conversation = None
    if conversation_id is not None:
        conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
        if conversation is None:
            raise Http404("No such conversation")
    initial = {
        "conversation": _conversation_state(conversation) if conversation else None,
        # The collections the picker offers: those the user may read.
        "collections": list(collections_readable(request.user).values("id", "name")),
        # The sidebar's list (static/frontend/sidebar.js groups it by date); archived ones are left out.
        "conversations": list(
            selectors.conversation_list(user=request.user, archived=False).values(
                "id", "title", "updated_at", "pinned"
            )[:SIDEBAR_CONVERSATIONS]
        ),
        "limits": _bounds(request.user),
    }
    # frontend: the chat page's templates kept their folder when the chat's package became chat/.
    return render(request, "frontend/chat.html", {"conversation": conversation, "initial": initial})


def _conversation_state(conversation) -> dict:
    """The conversation as the page shows it: with its collections, and each question's sources."""
    detail = selectors.conversation_detail(conversation)
    asked = [m["id"] for m in detail["messages"] if m["role"] == "user"]
    sources = quotes.sources_of(asked)
    for message in detail["messages"]:
        if message["id"] in sources:
            message["sources"] = sources[message["id"]]
    detail["collections"] = quotes.conversation_collections(
        conversation_id=conversation.pk, user=conversation.owner
    )
    return detail


def _browser_action(view):
    """POST only, logged-in session with the CSRF token, JSON in and out."""

    @csrf_exempt
    @json_view("POST", login=True)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        check_csrf(request, by_token=False)  # the session's user, whatever else is sent
        return view(request, read_json(request, max_bytes=ACTION_BODY_BYTES), *args, **kwargs)

    wrapper.__name__ = view.__name__
    wrapper.__doc__ = view.__doc__
    return wrapper


@_browser_action
def conversation_new(request: HttpRequest, data: dict) -> JsonResponse:
    """Create an empty conversation, so its settings can be chosen before the first message."""
    rates.change_check(user_id=request.user.pk)
    conversation = services.conversation_create(user=request.user, settings_data=data.get("settings") or {})
    return JsonResponse(selectors.conversation_summary(conversation), status=201)


@_browser_action
def conversation_rename(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    rates.change_check(user_id=request.user.pk)
    conversation = services.conversation_rename(
        user=request.user, conversation_id=conversation_id, title=data.get("title")
    )
    return JsonResponse({"id": conversation.pk, "title": conversation.title})


@_browser_action
def conversation_flags(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    """Pin or archive a conversation in the sidebar (or undo either)."""
    rates.change_check(user_id=request.user.pk)
    conversation = services.conversation_flag(user=request.user, conversation_id=conversation_id, data=data)
    return JsonResponse(
        {"id": conversation.pk, "pinned": conversation.pinned, "archived": conversation.archived}
    )


@_browser_action
def conversation_delete(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    rates.change_check(user_id=request.user.pk)
    services.conversation_delete(user=request.user, conversation_id=conversation_id)
    return JsonResponse({"deleted": conversation_id})


@_browser_action
def conversation_settings(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    """Change the conversation's system prompt, temperature or max answer length."""
    rates.change_check(user_id=request.user.pk)
    conversation = services.conversation_update_settings(
        user=request.user, conversation_id=conversation_id, data=data
    )
    return JsonResponse(selectors.conversation_settings(conversation))


@_browser_action
def conversation_show(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    """Remember which version the user looks at, so new messages and reloads follow it."""
    leaf = services.conversation_show(
        user=request.user,
        conversation_id=conversation_id,
        message_id=checked(protocol.MessageRef, data).message,
    )
    return JsonResponse({"current_leaf": leaf.pk})


def _shared_link(request: HttpRequest, link) -> dict:
    url = request.build_absolute_uri(reverse("shared", args=[link.token]))
    return {"url": url, "created_at": link.created_at.isoformat()}


@_browser_action
def conversation_share(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    """A read-only link to a snapshot of the version shown now."""
    rates.change_check(user_id=request.user.pk)
    link = services.conversation_share(user=request.user, conversation_id=conversation_id)
    return JsonResponse(_shared_link(request, link), status=201)


@json_view("GET", login=True)
def conversation_shares(request: HttpRequest, conversation_id: int) -> JsonResponse:
    """The conversation's links that still work, newest first, so the share dialog says if it is shared."""
    links = selectors.shared_links_live(user=request.user, conversation_id=conversation_id)
    if links is None:
        raise not_found("conversation")
    return JsonResponse({"live": [_shared_link(request, link) for link in links]})


@_browser_action
def conversation_unshare(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    """Revoke every link to the conversation: they answer 404 from now on."""
    count = services.conversation_unshare(user=request.user, conversation_id=conversation_id)
    return JsonResponse({"revoked": count})


@login_required
@require_GET
def conversation_export(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The conversation as a file: `?format=md` (the version shown) or `json` (every version)."""
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    if conversation is None:
        raise Http404("No such conversation")
    kind = request.GET.get("format", "md")
    if kind == "json":
        body = json.dumps(selectors.conversation_detail(conversation), ensure_ascii=False, indent=2)
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
    elif kind == "md":
        response = HttpResponse(
            selectors.conversation_markdown(conversation), content_type="text/markdown; charset=utf-8"
        )
    else:
        return HttpResponse("format must be md or json\n", status=400, content_type="text/plain")
    response["Content-Disposition"] = f'attachment; filename="conversation-{conversation.pk}.{kind}"'
    return response


@require_GET
def shared(request: HttpRequest, token: str) -> HttpResponse:
    """A shared snapshot, for anyone with the link; nothing else of the owner's is reachable."""
    link = selectors.shared_link_get(token=token)
    if link is None:
        raise Http404("No such shared conversation")
    response = render(
        request, "frontend/shared.html", {"snapshot": link.snapshot, "shared_at": link.created_at}
    )
    response["X-Robots-Tag"] = "noindex"
    # A revoked link must not live on in a shared cache, nor in the browser's.
    response["Cache-Control"] = "private, no-store"
    return response


@csrf_exempt
@json_view("POST", login=True)
async def document_attach(request: HttpRequest, conversation_id: int) -> JsonResponse:
    """Attach a file (multipart `file`) to the conversation, if it fits the context window."""
    user = await request.auser()
    check_csrf(request, by_token=False)
    await sync_to_async(rates.change_check)(user_id=user.pk)
    upload = request.FILES.get("file")
    if upload is None:
        raise Refusal("invalid_field", "send the document as the multipart field 'file'")
    document = await documents.document_attach(
        user=user, conversation_id=conversation_id, upload=upload, engine=engine_client()
    )
    return JsonResponse(
        {k: v for k, v in selectors.document_as_dict(document).items() if k != "text"}, status=201
    )


@_browser_action
def document_remove(request: HttpRequest, data: dict, conversation_id: int, document_id: int) -> JsonResponse:
    rates.change_check(user_id=request.user.pk)
    services.conversation_document_remove(
        user=request.user, conversation_id=conversation_id, document_id=document_id
    )
    return JsonResponse({"removed": document_id})


@_browser_action
def conversation_collections(request: HttpRequest, data: dict, conversation_id: int) -> JsonResponse:
    """Choose the collections the conversation's questions retrieve from (`collections`: ids)."""
    rates.change_check(user_id=request.user.pk)
    if selectors.conversation_get(user=request.user, conversation_id=conversation_id) is None:
        raise not_found("conversation")
    wanted = checked(ConversationCollections, data).collections
    chosen = quotes.conversation_collections_set(
        conversation_id=conversation_id, user=request.user, collection_ids=wanted
    )
    return JsonResponse({"collections": chosen})
