"""/metrics for Prometheus, and the staff dashboard with the JSON it polls."""

import hmac

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from apitokens.auth import bearer_token
from monitoring import metrics
from monitoring.figures import dashboard_figures
from usage import selectors as usage_selectors


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The web tier's metrics in Prometheus' text format (every process's, in multiprocess mode)."""
    token = settings.MONITORING_METRICS_TOKEN
    if token:
        given = bearer_token(request) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return HttpResponse("A bearer token is required.\n", status=401, content_type="text/plain")
    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)


@staff_member_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "monitoring/dashboard.html",
        {
            "refresh_ms": int(settings.MONITORING_REFRESH_SECONDS * 1000),
            "window_seconds": f"{settings.MONITORING_WINDOW_SECONDS:g}",
            "engine_url": settings.INFERENCE_URL,
            "top_users": usage_selectors.top_users(day=usage_selectors.today()),
        },
    )


@never_cache
@staff_member_required
def dashboard_data(request: HttpRequest) -> JsonResponse:
    return JsonResponse(dashboard_figures())
