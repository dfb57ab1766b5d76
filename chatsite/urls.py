from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("monitoring.urls")),
    path("", include("jobs.urls")),
    path("", include("openai_api.urls")),
    path("", include("usage.urls")),
    path("", include("apitokens.urls")),
    path("", include("frontend.urls")),
]
