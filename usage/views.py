from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from usage import selectors
from usage.models import UsageDay


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    """The user's tokens of the last 30 days, by source, and today's quota."""
    quota = selectors.quota_for(user=request.user)
    used = selectors.tokens_used(user_id=request.user.pk, day=selectors.today())
    return render(
        request,
        "usage/usage.html",
        {
            "days": selectors.usage_days(user=request.user),
            "sources": UsageDay.Source.values,
            "quota": quota,
            "used_today": used,
            "left_today": None if quota is None else max(0, quota - used),
            "reset": selectors.next_reset(),
        },
    )
