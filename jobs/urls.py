from django.urls import path

from jobs import views

app_name = "jobs"
urlpatterns = [
    path("api/jobs/", views.job_create, name="api-create"),
    path("api/jobs/<int:job_id>/", views.job_detail, name="api-detail"),
    path("api/jobs/<int:job_id>/results", views.job_results, name="api-results"),
]
