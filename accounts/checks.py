"""No account with a well-known password in production mode.

`make run` creates a demo and a staff account with well-known passwords for development. With
DEBUG off, configuring one of those passwords is an error (the process does not start), and so is
an account that still has one; `bootstrap_users` gives unset passwords random values instead.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.checks import Error, Tags, register
from django.db import DatabaseError


@register(Tags.security)
def check_no_default_passwords(app_configs, databases=None, **kwargs) -> list[Error]:
    if settings.DEBUG:
        return []
    errors = [
        Error(
            f"{name} is a well-known password while DEBUG is off",
            hint=f"Unset {name} for a random password printed once by bootstrap_users, or choose one.",
            id="accounts.E001",
        )
        for name in ("DEMO_PASSWORD", "STAFF_PASSWORD")
        if getattr(settings, name) in settings.DEFAULT_PASSWORDS
    ]
    if databases:  # `check --database default`, and `migrate`, which `make run` runs first
        errors += _accounts_with_default_passwords()
    return errors


def _accounts_with_default_passwords() -> list[Error]:
    try:
        users = list(
            get_user_model().objects.filter(
                username__in=[settings.DEMO_USERNAME, settings.STAFF_USERNAME], is_active=True
            )
        )
    except DatabaseError:  # not migrated yet: nothing to check
        return []
    return [
        Error(
            f"the account {user.username!r} still has a well-known password while DEBUG is off",
            hint="Set a new password (manage.py changepassword) or deactivate the account.",
            id="accounts.E002",
        )
        for user in users
        if any(user.check_password(password) for password in settings.DEFAULT_PASSWORDS)
    ]
