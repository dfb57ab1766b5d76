from django.urls import path

from monitoring import views

urlpatterns = [
    path("metrics", views.metrics_view, name="metrics"),
    path("monitoring/", views.dashboard, name="monitoring-dashboard"),
    path("monitoring/data.json", views.dashboard_data, name="monitoring-data"),
]
