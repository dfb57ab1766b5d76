"""The login page: a sign-in button for each provider above the password form, which SSO_ONLY folds
away for the break-glass account."""

from django.conf import settings
from django.contrib.auth import views as auth_views


class LoginView(auth_views.LoginView):
    def get_context_data(self, **kwargs) -> dict:
        return {**super().get_context_data(**kwargs), "sso_only": settings.SSO_ONLY}
