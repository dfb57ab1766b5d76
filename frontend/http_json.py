"""JSON over HTTP for the chat's endpoints: request bodies in, errors out.

Every error is `{"error": {"code": ..., "detail": ...}}` with a stable code and the
matching status; docs/store.md lists them.
"""

from collections.abc import Callable
from functools import wraps

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware

from frontend.protocol import Refusal, parse_json


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None, **extra):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}
        # What the refusal says beside its code, as the WebSocket's frames say it (`reason`, `retry_after`).
        self.extra = extra

    def response(self) -> JsonResponse:
        body = {"error": {"code": self.code, "detail": self.detail, **self.extra}}
        response = JsonResponse(body, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


def refused(refusal: Refusal) -> ApiError:
    """A protocol refusal as HTTP: its status, and Retry-After where it says when to retry."""
    retry_after = refusal.extra.get("retry_after")
    headers = {"Retry-After": str(round(retry_after))} if retry_after else None
    return ApiError(refusal.status, refusal.code, refusal.detail, headers, **refusal.extra)


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"no such {what}")


def unauthenticated() -> ApiError:
    detail = "log in, or send 'Authorization: Bearer TOKEN' with the needed scope"
    return ApiError(401, "unauthenticated", detail)


def read_json(request: HttpRequest, *, max_bytes: int) -> dict:
    """The request body as a JSON object; 413 past `max_bytes`, 400 when it is not an object."""
    length = request.headers.get("Content-Length")
    if (length and length.isdigit() and int(length) > max_bytes) or len(request.body) > max_bytes:
        raise ApiError(413, "too_large", f"the request body is larger than {max_bytes} bytes")
    try:
        data = parse_json(request.body or b"null")
    except Refusal as refusal:
        raise ApiError(400, "invalid_json", f"the request body is not JSON ({refusal.detail})") from None
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_json", "the request body must be a JSON object")
    return data


def check_csrf(request: HttpRequest, *, by_token: bool) -> None:
    """Writes authenticated by the session cookie need Django's CSRF token. A request whose
    user came from its bearer token (`by_token`) carries no cookie a third-party page could
    ride on, so it needs none; a bearer header that authenticated no one changes nothing."""
    if by_token:
        return
    rejection = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})
    if rejection is not None:
        raise ApiError(403, "csrf_failed", "the CSRF token is missing or wrong")


def json_errors(view: Callable) -> Callable:
    """Turn ApiError and protocol refusals raised by a view into JSON responses."""

    def convert(exc: Exception) -> JsonResponse:
        if isinstance(exc, Refusal):
            return refused(exc).response()
        return exc.response()

    caught = (ApiError, Refusal)
    if iscoroutinefunction(view):

        @wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            try:
                return await view(request, *args, **kwargs)
            except caught as exc:
                return convert(exc)

        return async_wrapper

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except caught as exc:
            return convert(exc)

    return wrapper
