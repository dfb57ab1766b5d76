"""JSON over HTTP: request bodies in, errors out, in one shape for every JSON endpoint.

An error is `{"error": {"code": ..., "detail": ..., ...}}` with the status of its code
(httpkit.errors), and `Retry-After` where the refusal says when to retry (docs/protocol.md).
"""

import json
from collections.abc import Callable
from functools import wraps

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware

from httpkit.errors import Refusal, unauthenticated


def parse_json(text: str | bytes) -> object:
    """What a client sent as JSON, or Refusal `invalid_json`: malformed, not UTF-8, or nested
    deeper than the parser can go (a body of `[[[[…` is a clear error, not a RecursionError)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refusal("invalid_json", f"invalid JSON: {exc.msg}") from None
    except UnicodeDecodeError:
        raise Refusal("invalid_json", "invalid JSON: not UTF-8") from None
    except RecursionError:
        raise Refusal("invalid_json", "invalid JSON: nested too deeply") from None


def read_json(request: HttpRequest, *, max_bytes: int) -> dict:
    """The request body as a JSON object; `too_large` past `max_bytes`, `invalid_json` when it is not one."""
    length = request.headers.get("Content-Length")
    if (length and length.isdigit() and int(length) > max_bytes) or len(request.body) > max_bytes:
        raise Refusal("too_large", f"the request body is larger than {max_bytes} bytes")
    try:
        data = parse_json(request.body or b"null")
    except Refusal as refusal:
        raise Refusal("invalid_json", f"the request body is not JSON ({refusal.detail})") from None
    if not isinstance(data, dict):
        raise Refusal("invalid_json", "the request body must be a JSON object")
    return data


def retry_after_header(seconds: float) -> str:
    """Retry-After in whole seconds, at least one: "0" would invite a retry at once."""
    return str(max(1, round(seconds)))


def error_body(refusal: Refusal) -> dict:
    """A refusal in the product's shape."""
    return {"error": {"code": refusal.code, "detail": refusal.detail, **refusal.extra}}


def error_response(refusal: Refusal, body: dict | None = None) -> JsonResponse:
    """A refusal as its JSON error response: in the product's shape, or as `body` (the OpenAI
    API's own shape), with the refusal's status and Retry-After either way."""
    response = JsonResponse(error_body(refusal) if body is None else body, status=refusal.status)
    if refusal.retry_after:
        response["Retry-After"] = retry_after_header(refusal.retry_after)
    return response


def check_csrf(request: HttpRequest, *, by_token: bool) -> None:
    """Writes authenticated by the session cookie need Django's CSRF token. A request whose
    user came from its bearer token (`by_token`) carries no cookie a third-party page could
    ride on, so it needs none; a bearer header that authenticated no one changes nothing."""
    if by_token:
        return
    rejection = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(request, None, (), {})
    if rejection is not None:
        raise Refusal("csrf_failed", "the CSRF token is missing or wrong")


def _not_allowed(methods: tuple[str, ...]) -> JsonResponse:
    response = error_response(Refusal("method_not_allowed", f"use {' or '.join(methods)}"))
    response["Allow"] = ", ".join(methods)
    return response


def json_view(*methods: str, login: bool = False) -> Callable[[Callable], Callable]:
    """A view (sync or async) that answers JSON whatever happens: a method other than `methods`
    gets 405 `method_not_allowed`, with `login` a request without a logged-in session 401
    `unauthenticated`, and a Refusal the view raises its error response."""
    logged_out = "log in first"

    def decorate(view: Callable) -> Callable:
        if iscoroutinefunction(view):

            @wraps(view)
            async def async_wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
                if request.method not in methods:
                    return _not_allowed(methods)
                try:
                    if login and not (await request.auser()).is_authenticated:
                        raise unauthenticated(logged_out)
                    return await view(request, *args, **kwargs)
                except Refusal as refusal:
                    return error_response(refusal)

            return async_wrapper

        @wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method not in methods:
                return _not_allowed(methods)
            try:
                if login and not request.user.is_authenticated:
                    raise unauthenticated(logged_out)
                return view(request, *args, **kwargs)
            except Refusal as refusal:
                return error_response(refusal)

        return wrapper

    return decorate
