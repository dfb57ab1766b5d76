"""Gives each HTTP request an id for its log records and echoes it in X-Request-Id."""

import re

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

from logcontext import new_request_id, scoped_log_context

# A caller's id is kept only when it is short and plain, so logs cannot be forged with it.
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def _request_id(request) -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if _VALID_ID.match(given) else new_request_id()


@sync_and_async_middleware
def request_id_middleware(get_response):
    """Runs in the async chain without a thread hop, and in the sync one."""
    if iscoroutinefunction(get_response):

        async def middleware(request):
            request_id = _request_id(request)
            with scoped_log_context(request_id=request_id, conversation_id=None, message_id=None):
                response = await get_response(request)
            response["X-Request-Id"] = request_id
            return response

    else:

        def middleware(request):
            request_id = _request_id(request)
            with scoped_log_context(request_id=request_id, conversation_id=None, message_id=None):
                response = get_response(request)
            response["X-Request-Id"] = request_id
            return response

    return middleware
