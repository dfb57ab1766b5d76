from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("login/", auth_views.LoginView.as_view(template_name="provider/login.html"), name="login"),
]
