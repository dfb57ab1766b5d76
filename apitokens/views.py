"""`/keys/`: a user's own API keys: issue one (shown once), see them, revoke them."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from apitokens.models import BATCH_PERMISSION, ApiToken, Scope
from apitokens.services import InvalidScope, KeyRefused, token_issue, token_revoke

NAME_LENGTH = 100


def _scopes_for(user) -> list[Scope]:
    held = {Scope.JOBS_SUBMIT: user.is_staff, Scope.BATCH: user.has_perm(BATCH_PERMISSION)}
    return [scope for scope in Scope if held.get(scope, True)]


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest) -> HttpResponse:
    plain, error, status = None, "", 200
    if request.method == "POST" and request.POST.get("action") == "revoke":
        if not token_revoke(prefix=request.POST.get("prefix", ""), user=request.user):
            raise Http404("No such key")
        return redirect("api-keys")
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        try:
            if len(name) > NAME_LENGTH:
                raise InvalidScope(f"the name is longer than {NAME_LENGTH} characters")
            _, plain = token_issue(user=request.user, scopes=request.POST.getlist("scope"), name=name)
        except KeyRefused as exc:
            error, status = f"No key was made: {exc}.", 400
    return render(
        request,
        "apitokens/keys.html",
        {
            # The plain key is in this one response only; it is never stored or shown again.
            "plain": plain,
            "error": error,
            "scopes": _scopes_for(request.user),
            "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at"),
        },
        status=status,
    )
