from django.urls import path

from monitoring import health, views

urlpatterns = [
    path("metrics", views.metrics_view, name="metrics"),
    path("monitoring/", views.dashboard, name="monitoring-dashboard"),
    path("monitoring/data.json", views.dashboard_data, name="monitoring-data"),
    path("healthz", health.healthz, name="healthz"),
    path("healthz/live", health.live, name="healthz-live"),
    path("healthz/ready", health.ready, name="healthz-ready"),
]
