"""/metrics for Prometheus, and the staff dashboard with the JSON it polls."""

import logging

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from redis.exceptions import RedisError

from httpkit.errors import Refusal
from httpkit.json import error_response
from monitoring import history, metrics
from monitoring.access import by_token, may_read_metrics
from monitoring.figures import dashboard_figures
from usage import selectors as usage_selectors

log = logging.getLogger(__name__)


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The web tier's metrics in Prometheus' text format (every process's, in multiprocess mode)."""
    if not may_read_metrics(request):
        if by_token(request) is False:
            return HttpResponse("A bearer token is required.\n", status=401, content_type="text/plain")
        detail = "Set MONITORING_METRICS_TOKEN to scrape /metrics from outside the private network.\n"
        return HttpResponse(detail, status=403, content_type="text/plain")
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
            "history_seconds": history.HISTORY_SECONDS,
            "history_minutes": history.HISTORY_SECONDS // 60,
            "sample_seconds": f"{history.SAMPLE_SECONDS:g}",
            "engine_url": settings.INFERENCE_URL,
            "top_users": usage_selectors.top_users(day=usage_selectors.today()),
        },
    )


@never_cache
@staff_member_required
def dashboard_data(request: HttpRequest) -> JsonResponse:
    """The figures now; with `?history=1`, also the recorded points of the last 15 minutes."""
    figures = dashboard_figures()
    if request.GET.get("history") == "1":
        try:
            figures["history"] = history.history_points()
        except RedisError as exc:
            # The failure's kind only: its text can name the server's address and configuration.
            log.warning("dashboard history: %s", exc)
            detail = f"Redis did not answer ({type(exc).__name__}); the charts start now."
            return error_response(Refusal("history_unavailable", detail))
    return JsonResponse(figures)
