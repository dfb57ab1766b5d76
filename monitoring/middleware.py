"""Gives each HTTP request an id for its log records and echoes it in X-Request-Id."""

import re

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from monitoring.logcontext import new_request_id, scoped_log_context

# A caller's id is kept only when it is short and plain, so logs cannot be forged with it.
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def _request_id(request) -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if _VALID_ID.match(given) else new_request_id()


class RequestIdMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        request_id = _request_id(request)
        with scoped_log_context(request_id=request_id, conversation_id=None, message_id=None):
            response = self.get_response(request)
        response["X-Request-Id"] = request_id
        return response

    async def _acall(self, request):
        request_id = _request_id(request)
        with scoped_log_context(request_id=request_id, conversation_id=None, message_id=None):
            response = await self.get_response(request)
        response["X-Request-Id"] = request_id
        return response
