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

# A request that waited out the database pool is refused as `busy`, not failed (chatsite.errors).
handler500 = "chatsite.errors.server_error"
