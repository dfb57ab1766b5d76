"""Errors that reach the top of a request: a refusal's body in the shape its client reads, and the
500 handler, which answers a wait for the database pool with `busy` instead of an error.

A web process lends its database connections from a pool (DATABASE_POOL_SIZE); a request that
waits past the pool's timeout for one was never served, and trying again shortly may succeed: it
is refused as `busy` (reason `database_pool`) with a retry-after, like every other bound, and
counted with them. Any other failure is Django's own 500.
"""

import sys

from django.conf import settings
from django.http import HttpResponse
from django.views import defaults
from psycopg_pool import PoolTimeout

from answers.metrics import admission_refused
from httpkit.errors import Refusal, busy
from httpkit.json import error_body, error_response, retry_after_header
from httpkit.pending import busy_page, wants_page
from openai_api import protocol as openai

POOL_REASON = "database_pool"


def json_body(path: str, refusal: Refusal) -> dict:
    """The refusal in the shape its client reads: OpenAI's under /v1/, the product's elsewhere."""
    if path.startswith("/v1/"):
        return openai.error_body(refusal)
    return error_body(refusal)


def waited_for_the_pool(error: BaseException | None) -> bool:
    """Whether `error`, or what it was raised from, is the pool's timeout (Django wraps it)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, PoolTimeout):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def server_error(request, template_name: str = defaults.ERROR_500_TEMPLATE_NAME):
    """handler500: called by Django inside the except block of the request's failure."""
    if waited_for_the_pool(sys.exc_info()[1]):
        admission_refused(POOL_REASON)
        refusal = busy(POOL_REASON, settings.CHAT_BUSY_RETRY_AFTER)
        if wants_page(request.method, request.headers.get("Accept", "")):
            response = HttpResponse(busy_page(refusal), status=refusal.status)
            response["Retry-After"] = retry_after_header(refusal.retry_after)
            return response
        return error_response(refusal, json_body(request.path, refusal))
    return defaults.server_error(request, template_name)
