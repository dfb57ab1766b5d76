from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from frontend import selectors


@login_required
def chat(request: HttpRequest, conversation_id: int | None = None) -> HttpResponse:
    """The chat page, optionally opened on one of the user's conversations."""
    conversation = None
    messages: list[dict] = []
    if conversation_id is not None:
        conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
        if conversation is None:
            raise Http404("No such conversation")
        messages = [selectors.message_as_dict(m) for m in conversation.messages.all()]
    return render(
        request,
        "frontend/chat.html",
        {
            "conversations": selectors.conversation_list(user=request.user)[:200],
            "conversation": conversation,
            "initial": {"conversation": conversation.pk if conversation else None, "messages": messages},
        },
    )
