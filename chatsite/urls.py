from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sso.views import LoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    # Login and logout only: passwords are changed and reset by staff (docs/security.md), so no
    # unthrottled reset or change views are mounted.
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Single sign-on: a provider's sign-in and its back-channel logout (sso/).
    path("", include("sso.urls")),
    path("", include("monitoring.urls")),
    path("", include("jobs.urls")),
    path("", include("openai_api.urls")),
    path("", include("batches.urls")),
    path("", include("usage.urls")),
    path("", include("apitokens.urls")),
    path("", include("conversations.urls")),
    path("", include("knowledge.urls")),
    path("", include("chat.urls")),
]

# A request that waited out the database pool is refused as `busy`, not failed (chatsite.errors).
handler500 = "chatsite.errors.server_error"
