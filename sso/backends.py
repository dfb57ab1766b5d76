"""Local passwords, as Django's ModelBackend checks them, unless SSO_ONLY turns them off.

With SSO_ONLY on, only the break-glass account (SSO_BREAK_GLASS_USER, a staff account kept for the
day the provider is down) logs in with a password, through the login form or the admin's; everyone
else signs in with a provider. The login throttle (accounts.throttle) counts every attempt first."""

from django.conf import settings
from django.contrib.auth.backends import ModelBackend

from accounts.throttle import normalize_username


class PasswordBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None or not settings.SSO_ONLY:
            return user
        glass = settings.SSO_BREAK_GLASS_USER
        if glass and normalize_username(user.get_username()) == normalize_username(glass) and user.is_staff:
            return user
        return None
