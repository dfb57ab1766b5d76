"""What every `/v1/` view shares: the key that authenticates it, its method, the model it names, and
refusals answered in OpenAI's shape."""

from collections.abc import Callable
from functools import wraps

from asgiref.sync import sync_to_async
from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from apitokens.auth import TokenRefused, bearer_token, token_user, user_for_token
from apitokens.models import Scope
from httpkit.errors import Refusal, unauthenticated
from httpkit.json import error_response
from inference.access import models_for
from openai_api import protocol


def openai_errors(view: Callable) -> Callable:
    """Answer what a view refuses in OpenAI's shape, with the status of its code."""

    @wraps(view)
    async def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return await view(request, *args, **kwargs)
        except Refusal as refusal:
            return error_response(refusal, protocol.error_body(refusal))

    return csrf_exempt(wrapper)


async def api_user(request: HttpRequest, scope: str = Scope.OPENAI) -> AbstractBaseUser:
    raw = bearer_token(request)
    if not raw:
        raise unauthenticated("Send your API key as 'Authorization: Bearer KEY'.")
    try:
        return await sync_to_async(token_user)(raw, scope)
    except TokenRefused as refused:
        if refused.reason == "missing_scope":
            raise Refusal("forbidden", f"This API key lacks the '{scope}' scope.") from None
        raise unauthenticated("Incorrect, revoked or expired API key.") from None


def method(request: HttpRequest, allowed: str) -> None:
    if request.method != allowed:
        raise Refusal("method_not_allowed", f"use {allowed}")


async def checked_model(user: AbstractBaseUser, name: str) -> str:
    if name not in await sync_to_async(models_for)(user=user):
        detail = f"The model '{name}' does not exist (GET /v1/models)."
        raise Refusal("model_not_found", detail, param="model")
    return name


def key_holds(request: HttpRequest, scope: str) -> bool:
    """Whether the request's key also holds `scope` (the key has been checked by api_user)."""
    return user_for_token(bearer_token(request) or "", scope) is not None


def query(request: HttpRequest) -> protocol.CursorQuery:
    """A list's query string, checked (protocol.cursor_query)."""
    return protocol.cursor_query({name: request.GET[name] for name in request.GET})
